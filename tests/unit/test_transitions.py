"""Pure task-record transitions and submit validation."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from tether.errors import InvalidTaskError
from tether.schemas.ids import InvalidNameError
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.schemas.records import Checkpoint, ErrorInfo, InputRequest, TaskRecord, TaskStatus
from tether.schemas.work import WorkMessage
from tether.tasks import child_rules, plans, rules

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=5)
ERROR = ErrorInfo(type="RuntimeError", message="boom")
TERMINAL = [TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED]
LIVE = [TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.WAITING]


def _submit(**changes: Any) -> TaskSubmit:
    fields: dict[str, Any] = {
        "task_id": "report-42",
        "steps": [
            StepSpec(tool="search", input={"query": "AI"}),
            StepSpec(tool="summarize"),
            StepSpec(tool="write_report"),
        ],
        "metadata": {"user": "alice"},
    }
    fields.update(changes)
    return TaskSubmit(**fields)


def _record(**changes: Any) -> TaskRecord:
    record = rules.new_record(_submit(), T0)
    return msgspec.structs.replace(record, **changes) if changes else record


def _checkpoint(output: Any = "out", next_steps: list[StepSpec] | None = None) -> Checkpoint:
    return Checkpoint(output=output, next_steps=next_steps, time=T1)


# -- new_record ---------------------------------------------------------------


def test_new_record_is_pending_at_step_zero() -> None:
    submit = _submit()
    record = rules.new_record(submit, T0, submit_seq=7)
    assert record.task_id == "report-42"
    assert record.status is TaskStatus.PENDING
    assert record.steps == submit.steps
    assert record.current_step == 0
    assert record.result is None
    assert record.error is None
    assert record.metadata == {"user": "alice"}
    assert record.created_at == T0
    assert record.updated_at == T0
    assert record.deadline_at is None
    assert record.generation == 1
    assert record.submit_seq == 7


def test_new_record_copies_steps_and_metadata() -> None:
    submit = _submit()
    record = rules.new_record(submit, T0)
    assert record.steps is not submit.steps
    assert record.metadata is not submit.metadata


def test_new_record_deadline_is_relative_to_now() -> None:
    record = rules.new_record(_submit(deadline_ms=600_000), T0)
    assert record.deadline_at == T0 + timedelta(minutes=10)


def test_deadline_passed() -> None:
    record = rules.new_record(_submit(deadline_ms=1000), T0)
    assert not rules.deadline_passed(record, T0)
    assert not rules.deadline_passed(record, T0 + timedelta(milliseconds=999))
    assert rules.deadline_passed(record, T0 + timedelta(seconds=1))
    assert rules.deadline_passed(record, T0 + timedelta(days=1))
    no_deadline = rules.new_record(_submit(), T0)
    assert not rules.deadline_passed(no_deadline, T0 + timedelta(days=3650))


# -- is_stale -----------------------------------------------------------------


@pytest.mark.parametrize("status", TERMINAL)
def test_is_stale_when_terminal(status: TaskStatus) -> None:
    record = _record(status=status, current_step=1)
    assert rules.is_stale(record, 1, 1)


def test_the_last_step_of_a_completed_task_is_replayed_not_dropped() -> None:
    record = _record(status=TaskStatus.COMPLETED, current_step=3)
    assert not rules.is_stale(record, 2, 1)  # its events may still be missing
    assert rules.is_stale(record, 1, 1)


@pytest.mark.parametrize("status", LIVE)
def test_not_stale_at_the_current_step(status: TaskStatus) -> None:
    record = _record(status=status, current_step=1)
    assert not rules.is_stale(record, 1, 1)


@pytest.mark.parametrize("generation", [0, 2, 3])
def test_is_stale_for_another_generation(generation: int) -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=1)
    assert rules.is_stale(record, 1, generation)


def test_current_generation_after_a_rerun() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=1, generation=2)
    assert not rules.is_stale(record, 1, 2)
    assert rules.is_stale(record, 1, 1)


def test_record_one_past_the_step_is_not_stale() -> None:
    """The record moves before the hand-off: a redelivery must still hand off."""
    record = _record(status=TaskStatus.RUNNING, current_step=2)
    assert not rules.is_stale(record, 1, 1)


def test_record_two_past_the_step_is_stale() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=3)
    assert rules.is_stale(record, 1, 1)


def test_record_behind_the_step_is_stale() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=0)
    assert rules.is_stale(record, 1, 1)


# -- start_step ---------------------------------------------------------------


def test_start_step_moves_pending_to_running_once() -> None:
    record = _record()
    started = rules.start_step(record, 0, T1)
    assert started is not None
    assert started.status is TaskStatus.RUNNING
    assert started.updated_at == T1
    assert rules.start_step(started, 0, T1) is None
    assert rules.start_step(record, 1, T1) is None


# -- complete_step ------------------------------------------------------------


def test_complete_step_moves_to_the_next_step() -> None:
    record = _record(status=TaskStatus.RUNNING)
    done = rules.complete_step(record, 0, _checkpoint("hits"), T1)
    assert done is not None
    assert done.current_step == 1
    assert done.status is TaskStatus.RUNNING
    assert done.result is None
    assert done.steps == record.steps
    assert done.updated_at == T1
    assert done.created_at == T0


def test_complete_step_from_pending_runs_the_task() -> None:
    done = rules.complete_step(_record(), 0, _checkpoint(), T1)
    assert done is not None
    assert done.status is TaskStatus.RUNNING


def test_complete_last_step_completes_with_the_result() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=2)
    done = rules.complete_step(record, 2, _checkpoint({"report": "ok"}), T1)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"report": "ok"}
    assert done.current_step == 3 == done.plan_length
    assert (done.done_steps, [s.tool for s in done.steps]) == (2, ["write_report"])


def test_complete_step_inserts_next_steps_right_after_it() -> None:
    record = _record(status=TaskStatus.RUNNING)
    added = [StepSpec(tool="fetch", input=1), StepSpec(tool="fetch", input=2)]
    done = rules.complete_step(record, 0, _checkpoint("plan", next_steps=added), T1)
    assert done is not None
    assert [s.tool for s in done.steps] == ["search", "fetch", "fetch", "summarize", "write_report"]
    assert done.steps[1:3] == added
    assert done.current_step == 1
    assert done.status is TaskStatus.RUNNING
    # the original record is untouched
    assert len(record.steps) == 3


def test_next_steps_on_the_last_step_keep_the_task_running() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=2)
    done = rules.complete_step(
        record, 2, _checkpoint("turn", next_steps=[StepSpec(tool="llm")]), T1
    )
    assert done is not None
    assert done.status is TaskStatus.RUNNING
    assert done.result is None
    assert [s.tool for s in done.steps] == ["write_report", "llm"]
    assert (done.done_steps, done.current_step, done.plan_length) == (2, 3, 4)
    assert done.spec(3).tool == "llm"


def test_a_growing_plan_keeps_the_record_the_same_size() -> None:
    """An agent that appends its next turn at every step: the record holds the last
    completed step and the next, never the history (that is in the checkpoints)."""
    record = _record(steps=[StepSpec(tool="llm")], status=TaskStatus.RUNNING)
    sizes = {}
    for turn in range(500):
        next_turn = _checkpoint("turn", next_steps=[StepSpec(tool="llm", input={"turn": turn})])
        done = rules.complete_step(record, turn, next_turn, T1)
        assert done is not None
        record = done
        sizes[turn] = len(msgspec.json.encode(record))
    assert record.current_step == 500 and record.plan_length == 501
    assert record.spec(500).input == {"turn": 499}
    assert sizes[499] <= sizes[10] + 8  # a few more digits in the counters, no more


def test_empty_next_steps_change_nothing() -> None:
    record = _record(status=TaskStatus.RUNNING)
    done = rules.complete_step(record, 0, _checkpoint(next_steps=[]), T1)
    assert done is not None
    assert done.steps == record.steps


def test_complete_step_clears_a_waiting_request() -> None:
    record = _record(
        status=TaskStatus.WAITING, input_request=InputRequest(prompt="ok?"), current_step=1
    )
    done = rules.complete_step(record, 1, _checkpoint(True), T1)
    assert done is not None
    assert done.status is TaskStatus.RUNNING
    assert done.input_request is None


@pytest.mark.parametrize("current", [0, 2])
def test_complete_step_of_another_step_does_nothing(current: int) -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=current)
    assert rules.complete_step(record, 1, _checkpoint(), T1) is None


@pytest.mark.parametrize("status", TERMINAL)
def test_complete_step_of_terminal_task_does_nothing(status: TaskStatus) -> None:
    record = _record(status=status, current_step=1)
    assert rules.complete_step(record, 1, _checkpoint(), T1) is None


def test_plan_after_without_next_steps_is_the_same_plan() -> None:
    record = _record()
    assert rules.plan_after(record, 0, _checkpoint()) == record.steps


# -- next_work / current_work -------------------------------------------------


def test_next_work_passes_the_previous_output_when_input_is_omitted() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=1)
    (work,) = rules.next_work(record, 0, {"hits": [1, 2]})
    assert work == WorkMessage(
        task_id="report-42", step=1, tool="summarize", input={"hits": [1, 2]}, generation=1
    )


def test_next_work_keeps_an_explicit_input() -> None:
    steps = [StepSpec(tool="a"), StepSpec(tool="b", input={"fixed": True})]
    record = _record(steps=steps, status=TaskStatus.RUNNING, current_step=1)
    (work,) = rules.next_work(record, 0, "previous output")
    assert work.input == {"fixed": True}
    assert work.tool == "b"


@pytest.mark.parametrize("explicit", [0, False, "", [], {}])
def test_next_work_keeps_a_falsy_explicit_input(explicit: Any) -> None:
    steps = [StepSpec(tool="a"), StepSpec(tool="b", input=explicit)]
    record = _record(steps=steps)
    (work,) = rules.next_work(record, 0, "previous output")
    assert work.input == explicit


def test_next_work_carries_the_generation() -> None:
    record = _record(generation=3)
    (work,) = rules.next_work(record, 0, None)
    assert work.generation == 3


def test_next_work_is_empty_after_the_last_step() -> None:
    record = _record()
    assert rules.next_work(record, 2, "final") == []
    assert rules.next_work(record, 5, "final") == []


def test_next_work_follows_an_extended_plan() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=2)
    done = rules.complete_step(
        record, 2, _checkpoint("turn", next_steps=[StepSpec(tool="llm")]), T1
    )
    assert done is not None
    (work,) = rules.next_work(done, 2, "turn")
    assert (work.step, work.tool, work.input) == (3, "llm", "turn")


def test_current_work_is_the_current_step_with_its_own_input() -> None:
    (work,) = rules.current_work(_record(), previous_output="ignored")
    assert work == WorkMessage(
        task_id="report-42", step=0, tool="search", input={"query": "AI"}, generation=1
    )


def test_current_work_without_input_takes_the_previous_output() -> None:
    record = _record(current_step=1)
    (work,) = rules.current_work(record, previous_output=["hit"])
    assert (work.step, work.input) == (1, ["hit"])


def test_retry_from_failure_starts_a_new_generation_at_the_failed_step() -> None:
    failed = rules.fail(_record(status=TaskStatus.RUNNING, current_step=1), 1, ERROR, T1)
    assert failed is not None
    retried = rules.retry_from_failure(failed, T1)
    assert retried is not None
    assert (retried.status, retried.current_step, retried.generation) == (TaskStatus.RUNNING, 1, 2)
    assert retried.error is None and retried.failed_step is None
    assert rules.retry_from_failure(retried, T1) is None


def test_a_retried_step_whose_child_failed_runs_again_instead_of_waiting_for_it() -> None:
    """The failed child's run is over: a retry that kept `awaiting` left the step's worker
    waiting for a child that will never end again (the task hung for good)."""
    from tether.schemas.work import WorkMessage
    from tether.worker.decisions import Execute, decide

    awaiting = _record(status=TaskStatus.RUNNING, current_step=1, awaiting="t-s1", wake_at=T0)
    failed = rules.fail(awaiting, 1, ERROR, T1)
    assert failed is not None
    retried = rules.retry_from_failure(failed, T1)
    assert retried is not None and retried.awaiting is None and retried.wake_at is None
    work = WorkMessage(task_id=retried.task_id, step=1, tool="b", generation=2)
    assert decide(retried, None, work) == Execute()


# -- fail / cancel / wait_for_input -------------------------------------------


@pytest.mark.parametrize("status", LIVE)
def test_fail_a_live_task(status: TaskStatus) -> None:
    record = _record(status=status, current_step=1)
    failed = rules.fail(record, 1, ERROR, T1)
    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error == ERROR
    assert failed.failed_step == 1
    assert failed.updated_at == T1


def test_fail_without_a_step() -> None:
    failed = rules.fail(_record(), None, ERROR, T1)
    assert failed is not None
    assert failed.failed_step is None


@pytest.mark.parametrize("status", TERMINAL)
def test_fail_never_changes_a_terminal_record(status: TaskStatus) -> None:
    assert rules.fail(_record(status=status), 0, ERROR, T1) is None


@pytest.mark.parametrize("status", LIVE)
def test_cancel_a_live_task(status: TaskStatus) -> None:
    record = _record(status=status, input_request=InputRequest(prompt="?"))
    cancelled = rules.cancel(record, T1)
    assert cancelled is not None
    assert cancelled.status is TaskStatus.CANCELLED
    assert cancelled.input_request is None
    assert cancelled.updated_at == T1


@pytest.mark.parametrize("status", TERMINAL)
def test_cancel_never_changes_a_terminal_record(status: TaskStatus) -> None:
    assert rules.cancel(_record(status=status), T1) is None


def test_wait_for_input() -> None:
    request = InputRequest(prompt="Approve?", schema={"type": "boolean"})
    record = _record(status=TaskStatus.RUNNING, current_step=1)
    waiting = rules.wait_for_input(record, 1, request, T1)
    assert waiting is not None
    assert waiting.status is TaskStatus.WAITING
    assert waiting.input_request == request
    assert waiting.current_step == 1
    assert waiting.updated_at == T1


def test_wait_for_input_of_another_step_does_nothing() -> None:
    record = _record(status=TaskStatus.RUNNING, current_step=1)
    assert rules.wait_for_input(record, 0, InputRequest(prompt="?"), T1) is None


@pytest.mark.parametrize("status", TERMINAL)
def test_wait_for_input_of_terminal_task_does_nothing(status: TaskStatus) -> None:
    record = _record(status=status)
    assert rules.wait_for_input(record, 0, InputRequest(prompt="?"), T1) is None


# -- plans.validate_submit ----------------------------------------------------


def test_valid_submit_passes() -> None:
    plans.validate_submit(_submit(deadline_ms=600_000))
    plans.validate_submit(_submit(steps=[StepSpec(tool="a")] * plans.MAX_STEPS))
    plans.validate_submit(_submit(deadline_ms=plans.MAX_DEADLINE_MS))


def test_invalid_task_error_is_a_value_error() -> None:
    assert issubclass(InvalidTaskError, ValueError)


def test_empty_plan_is_rejected() -> None:
    with pytest.raises(InvalidTaskError, match=r"task 'report-42' has no steps: give at least one"):
        plans.validate_submit(_submit(steps=[]))


def test_too_many_steps_are_rejected() -> None:
    steps = [StepSpec(tool="a")] * (plans.MAX_STEPS + 1)
    with pytest.raises(InvalidTaskError) as info:
        plans.validate_submit(_submit(steps=steps))
    message = str(info.value)
    assert "'report-42'" in message
    assert f"{plans.MAX_STEPS + 1} steps" in message
    assert f"limit is {plans.MAX_STEPS}" in message


def test_bad_task_id_is_rejected_as_an_invalid_task() -> None:
    with pytest.raises(InvalidTaskError, match=re.escape("no '.', '*', '>' or spaces")) as info:
        plans.validate_submit(_submit(task_id="a.b"))
    assert isinstance(info.value.__cause__, InvalidNameError)


@pytest.mark.parametrize("tool", ["_private", "a.b", "", "has space"])
def test_bad_tool_is_rejected_naming_the_step(tool: str) -> None:
    steps = [StepSpec(tool="search"), StepSpec(tool=tool)]
    with pytest.raises(InvalidTaskError) as info:
        plans.validate_submit(_submit(steps=steps))
    message = str(info.value)
    assert "task 'report-42', step 1" in message
    assert "tool name" in message
    assert "starting with a letter or digit" in message
    assert isinstance(info.value.__cause__, InvalidNameError)


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_bad_timeout_is_rejected(timeout_ms: int) -> None:
    steps = [StepSpec(tool="search", timeout_ms=timeout_ms)]
    with pytest.raises(
        InvalidTaskError, match=r"task 'report-42', step 0 \(search\): timeout_ms must be positive"
    ):
        plans.validate_submit(_submit(steps=steps))


@pytest.mark.parametrize("deadline_ms", [0, -5, plans.MAX_DEADLINE_MS + 1])
def test_bad_deadline_is_rejected(deadline_ms: int) -> None:
    with pytest.raises(InvalidTaskError) as info:
        plans.validate_submit(_submit(deadline_ms=deadline_ms))
    message = str(info.value)
    assert "'report-42'" in message
    assert f"deadline_ms must be between 1 and {plans.MAX_DEADLINE_MS}" in message


# -- plans.to_step / task_id_of ----------------------------------------------


def test_to_step_accepts_a_tool_name() -> None:
    assert plans.to_step("search") == StepSpec(tool="search")


def test_to_step_accepts_a_dict() -> None:
    step = plans.to_step({"tool": "search", "input": {"q": 1}, "timeout_ms": 100})
    assert step == StepSpec(tool="search", input={"q": 1}, timeout_ms=100)


def test_to_step_returns_a_step_spec_as_is() -> None:
    spec = StepSpec(tool="llm", input=[1])
    assert plans.to_step(spec) is spec


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"input": 1}, "tool"),
        ({"tool": 5}, "$.tool"),
        ({"tool": "a", "timeout_ms": "x"}, "timeout_ms"),
    ],
)
def test_to_step_rejects_a_bad_dict_with_the_field(bad: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidTaskError) as info:
        plans.to_step(bad)
    assert "invalid step" in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"task_id": "t-1", "steps": 5}', "t-1"),
        (b'{"task_id": "a.b"}', None),
        (b'{"task_id": 3}', None),
        (b"[1, 2]", None),
        (b"not json", None),
        (b"{}", None),
    ],
)
def test_task_id_of_an_undecodable_submission(data: bytes, expected: str | None) -> None:
    assert plans.task_id_of(data) == expected


def test_a_child_that_ended_first_is_still_listed_once_by_its_parent() -> None:
    parent = _record()
    listed = child_rules.list_child(parent, "kid", T0 + timedelta(seconds=1))
    assert listed is not None and listed.children == ["kid"]
    assert child_rules.list_child(listed, "kid", T0) is None  # listed already: no write
