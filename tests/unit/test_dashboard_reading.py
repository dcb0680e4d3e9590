"""What a reader of a task page takes in first (`tether.ui`): the question asked, retry
errors folded into one line with a count, and counts whose nouns agree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, Usage
from tether.tasks.questions import Message, question
from tether.ui import views
from tether.ui.folds import folded

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DOWN = ErrorInfo(type="APIConnectionError", message="could not connect to the model")


def attempt(number: int, outcome: str, error: ErrorInfo | None = None) -> views.Attempt:
    start = T0 + timedelta(seconds=number)
    ended = None if outcome == "running" else start + timedelta(seconds=0.5)
    return views.Attempt(number, start, ended, outcome, error)


def test_identical_retry_errors_fold_into_one_line_with_a_count() -> None:
    attempts = [
        attempt(1, "retrying", DOWN),
        attempt(2, "retrying", ErrorInfo(type=DOWN.type, message=DOWN.message, traceback="x")),
        attempt(3, "retrying", DOWN),
        attempt(4, "running"),
    ]

    folds = folded(attempts)

    assert [fold.count for fold in folds] == [3, 1]
    assert folds[0].head == "attempts 1–3 failed 3 times"
    assert folds[0].error is not None and folds[0].error.message == DOWN.message
    assert folds[1].head == "attempt 4: running"


def test_different_errors_and_crashes_fold_apart() -> None:
    other = ErrorInfo(type="RateLimitError", message="429")
    attempts = [
        attempt(1, "crashed"),
        attempt(2, "crashed"),
        attempt(3, "retrying", DOWN),
        attempt(4, "retrying", other),
        attempt(5, "failed", other),  # the last attempt failed the same way
    ]

    folds = folded(attempts)

    assert [fold.head for fold in folds] == [
        "attempts 1–2 crashed 2 times",
        "attempt 3: retrying",
        "attempts 4–5 failed 2 times",
    ]
    assert folds[-1].outcome == "failed"


def test_counts_agree_with_their_nouns() -> None:
    assert views.plural(1, "call") == "1 call"
    assert views.plural(2, "call") == "2 calls"
    assert views.plural(0, "byte") == "0 bytes"
    assert views.plural(1_200, "byte") == "1,200 bytes"
    one = Usage(input_tokens=10, output_tokens=5, requests=1, cost_usd=0.0012)
    assert views.usage_text(one) == "10 in · 5 out · 1 call · $0.0012"
    two = Usage(input_tokens=10, output_tokens=5, requests=2, model="m", cost_usd=0.5)
    assert views.usage_text(two, model=True) == "10 in · 5 out · 2 calls · m · $0.5000"


def test_a_usage_with_no_price_says_its_cost_is_unknown() -> None:
    unpriced = Usage(input_tokens=10, output_tokens=5, requests=1, cost_usd=cast(Any, None))
    assert views.usage_text(unpriced) == "10 in · 5 out · 1 call · cost unknown"


def test_an_agents_question_is_its_first_steps_input() -> None:
    asked = StepSpec(tool="researcher", input={"input": "Why durable?", "token_budget": 900})
    found = question(asked, agent=True)
    assert found is not None and found.messages == [Message("user", "Why durable?")]
    assert question(asked, agent=None) == found  # unknown tool: its shape says agent


def test_an_agents_messages_and_instructions_are_shown_as_given() -> None:
    messages = [
        {"role": "user", "content": "Compare these."},
        {"role": "assistant", "content": "Which ones?"},
        {"role": "user", "content": [{"type": "text", "text": t} for t in ("NATS", "Kafka")]},
    ]
    spec = StepSpec(tool="a", input={"input": messages, "instructions": "Be brief.", "after": "t0"})

    found = question(spec, agent=True)

    assert found is not None
    assert [(m.role, m.text) for m in found.messages] == [
        ("user", "Compare these."),
        ("assistant", "Which ones?"),
        ("user", "NATS\nKafka"),
    ]
    assert (found.instructions, found.after) == ("Be brief.", "t0")


def test_a_plain_tools_input_is_no_question() -> None:
    assert question(StepSpec(tool="fetch", input={"input": "x"}), agent=False) is None
    assert question(StepSpec(tool="fetch", input={"input": "x", "url": "u"}), agent=None) is None
    assert question(StepSpec(tool="fetch", input="x"), agent=None) is None
    assert question(None, agent=None) is None
