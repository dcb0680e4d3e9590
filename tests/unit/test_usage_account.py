"""The account of what a task spent (pure): unknown costs stay unknown, cut-off calls
count, unkept attempts add to the record, and which failures are expected outcomes."""

from __future__ import annotations

import msgspec
import pytest

from tether.cli.output import format_usage
from tether.clock import utcnow
from tether.demo.story import calls_account
from tether.errors import GuardrailTripped, TerminalError
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus, Usage
from tether.tasks.usage import with_spent
from tether.worker.expected import is_expected

PRICED = Usage(input_tokens=100, output_tokens=10, requests=1, cost_usd=0.5)
UNPRICED = Usage(input_tokens=100, output_tokens=10, requests=1)
CUT_OFF = Usage(requests=1, unfinished=1)


@pytest.mark.parametrize(
    ("parts", "cost"),
    [
        ((PRICED, PRICED), 1.0),
        ((PRICED, UNPRICED), None),  # tokens with no price: the sum's cost is unknown
        ((UNPRICED, UNPRICED), None),
        ((PRICED, CUT_OFF), 0.5),  # no tokens, no price: changes nothing
        ((CUT_OFF, CUT_OFF), None),
    ],
)
def test_a_cost_is_known_only_when_every_part_with_tokens_has_a_price(
    parts: tuple[Usage, Usage], cost: float | None
) -> None:
    assert (parts[0] + parts[1]).cost_usd == cost


def test_cut_off_calls_add_up_and_count_among_the_calls() -> None:
    total = PRICED + CUT_OFF + CUT_OFF
    assert (total.requests, total.unfinished, total.total_tokens) == (3, 2, 110)


def test_an_old_usage_without_a_cost_reads_as_unknown() -> None:
    old = msgspec.json.decode(b'{"input_tokens": 5, "requests": 1}', type=Usage)
    assert old.cost_usd is None
    assert b"cost_usd" not in msgspec.json.encode(UNPRICED)  # unknown is left out


def test_the_cli_says_cost_unknown_and_calls_cut_off() -> None:
    assert format_usage(PRICED).endswith(", $0.5000")
    unknown = format_usage(UNPRICED + CUT_OFF)
    assert "2 LLM calls (1 cut off: tokens unknown)" in unknown
    assert unknown.endswith("cost unknown (no price for the model)") and "$" not in unknown
    assert "cost" not in format_usage(CUT_OFF)  # nothing spent that a price could tell


def test_the_demo_accounts_for_every_call() -> None:
    assert calls_account(PRICED + CUT_OFF) == (
        "2 LLM calls: 1 finished (110 tokens), 1 cut off by the crash (tokens unknown)"
    )
    assert calls_account(PRICED) == "1 LLM call: 1 finished (110 tokens)"


def _record(status: TaskStatus, generation: int = 1) -> TaskRecord:
    now = utcnow()
    return TaskRecord(
        task_id="t",
        status=status,
        steps=[StepSpec(tool="x")],
        created_at=now,
        updated_at=now,
        generation=generation,
        usage=PRICED,
    )


def test_an_unkept_attempts_spend_is_added_even_to_a_cancelled_task() -> None:
    grown = with_spent(_record(TaskStatus.CANCELLED), 1, PRICED)
    assert grown is not None and grown.status is TaskStatus.CANCELLED
    assert grown.usage == PRICED + PRICED


def test_nothing_spent_or_another_run_writes_nothing() -> None:
    assert with_spent(_record(TaskStatus.RUNNING), 1, None) is None
    assert with_spent(_record(TaskStatus.RUNNING, generation=2), 1, PRICED) is None


def test_only_errors_marked_expected_are_expected_outcomes() -> None:
    assert is_expected(GuardrailTripped("no"))
    assert not is_expected(TerminalError("bad input"))
    assert not is_expected(RuntimeError("boom"))
    assert not is_expected(None)
