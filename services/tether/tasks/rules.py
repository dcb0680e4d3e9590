"""Task rules (pure, no I/O): how a record changes and what runs next.

Every change to a task is one of these functions applied by compare-and-set
(`TaskService` and its parts); the rules of child tasks are in `tasks.child_rules`, of
parallel steps in `tasks.branch_rules`, the checks of a submitted plan in `tasks.plans`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from tether.errors import InvalidTaskError
from tether.schemas.failures import FailureType
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.schemas.records import Checkpoint, ErrorInfo, InputRequest, TaskRecord, TaskStatus
from tether.schemas.work import Timer, WorkMessage
from tether.tasks.usage import add_usage


def new_record(
    submit: TaskSubmit, now: datetime, submit_seq: int = 0, note: str | None = None
) -> TaskRecord:
    deadline = None
    if submit.deadline_ms is not None:
        deadline = now + timedelta(milliseconds=submit.deadline_ms)
    return TaskRecord(
        task_id=submit.task_id,
        status=TaskStatus.PENDING,
        steps=list(submit.steps),
        metadata=dict(submit.metadata),
        created_at=now,
        updated_at=now,
        deadline_at=deadline,
        submit_seq=submit_seq,
        note=note,
    )


def resubmitted(existing: TaskRecord, new: TaskRecord) -> bool:
    """Whether `new`, a direct submission, repeats the one that created `existing` and
    that may not have handed off its first step (its submitter stopped in between)."""
    return (
        existing.submit_seq == new.submit_seq == 0
        and existing.parent is None
        and existing.status is TaskStatus.PENDING
        and existing.current_step == 0
        and existing.steps == new.steps
        and existing.metadata == new.metadata
    )


def plan_before(plan: list[StepSpec], added: dict[int, int]) -> list[StepSpec]:
    """`plan` without the steps that steps `added` inserted (step -> how many, right
    after it), latest first, so steps inserted by inserted steps go too."""
    steps = list(plan)
    for step in sorted(added, reverse=True):
        del steps[step + 1 : step + 1 + added[step]]
    return steps


def forked(
    source: TaskRecord,
    plan: list[StepSpec],
    from_step: int,
    task_id: str,
    now: datetime,
    new_input: Any = None,
) -> TaskRecord:
    """A new task that runs `plan` from `from_step`, the steps before it already done
    (their checkpoints are copied); `new_input` replaces that step's input."""
    ran = source.current_step  # every step before it has its checkpoint
    if source.status is TaskStatus.COMPLETED:
        ran = source.plan_length
    elif source.status is TaskStatus.FAILED and source.failed_step is not None:
        ran = source.failed_step
    if not 0 <= from_step < len(plan) or from_step > ran:
        raise InvalidTaskError(
            f"task {source.task_id!r} cannot be forked from step {from_step}: pick a step "
            f"between 0 and {min(ran, len(plan) - 1)} (the steps before it must have run)"
        )
    steps = list(plan)
    if new_input is not None:
        if steps[from_step].parallel is not None:
            raise InvalidTaskError("a parallel step takes no input: give its branches inputs")
        steps[from_step] = msgspec.structs.replace(steps[from_step], input=new_input)
    kept = max(0, from_step - 1)
    metadata = {**source.metadata, "forked_from": {"task_id": source.task_id, "step": from_step}}
    return TaskRecord(
        task_id=task_id,
        status=TaskStatus.PENDING,
        steps=steps[kept:],
        done_steps=kept,
        current_step=from_step,
        metadata=metadata,
        created_at=now,
        updated_at=now,
    )


def is_stale(record: TaskRecord, step: int, generation: int) -> bool:
    """True when a work message for `step` has nothing left to do.

    The record moves past a step before the next step is handed off, so
    `current_step == step + 1` is not stale: the hand-off may still be missing.
    """
    if generation != record.generation or record.status in (
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
    ):
        return True
    if record.status is TaskStatus.COMPLETED:  # only the last step's events may need a replay
        return record.current_step != step + 1
    return record.current_step not in (step, step + 1)


def deadline_passed(record: TaskRecord, now: datetime) -> bool:
    return record.deadline_at is not None and now >= record.deadline_at


def expired(record: TaskRecord, timer: Timer, now: datetime) -> ErrorInfo | None:
    """Why a timer that fired fails the task now, or None when it has nothing to do
    (the task ended, was answered, was retried, or the deadline moved)."""
    if record.status.is_terminal:
        return None
    if timer.kind == "deadline":
        if not deadline_passed(record, now):
            return None
        assert record.deadline_at is not None
        at = record.deadline_at.isoformat()
        return ErrorInfo(
            type=FailureType.DEADLINE_EXCEEDED, message=f"the task's deadline passed at {at}"
        )
    request = record.input_request
    if (
        record.status is not TaskStatus.WAITING
        or (record.current_step, record.generation) != (timer.step, timer.generation)
        or request is None
        or request.expires_at is None
        or now < request.expires_at
    ):
        return None
    return ErrorInfo(
        type=FailureType.INPUT_EXPIRED,
        message=f"no answer to {request.prompt!r} by {request.expires_at.isoformat()}",
    )


def start_step(
    record: TaskRecord, step: int, now: datetime, build: str | None = None
) -> TaskRecord | None:
    """pending → running when the first step starts (on `build`); no write for later steps."""
    if record.status is not TaskStatus.PENDING or record.current_step != step:
        return None
    started = record.build or build
    return msgspec.structs.replace(
        record, status=TaskStatus.RUNNING, note=None, updated_at=now, build=started
    )


def plan_after(record: TaskRecord, step: int, checkpoint: Checkpoint) -> list[StepSpec]:
    """The plan once `step` completed: steps the tool added run right after it."""
    if not checkpoint.next_steps:
        return record.steps
    after = step - record.done_steps + 1
    return record.steps[:after] + list(checkpoint.next_steps) + record.steps[after:]


def complete_step(
    record: TaskRecord, step: int, checkpoint: Checkpoint, now: datetime
) -> TaskRecord | None:
    if record.status.is_terminal or record.current_step != step:
        return None
    # Keep the plan from this step on: a replayed hand-off still names its tool.
    steps = plan_after(record, step, checkpoint)[step - record.done_steps :]
    done = len(steps) == 1
    return msgspec.structs.replace(
        record,
        steps=steps,
        done_steps=step,
        current_step=step + 1,
        status=TaskStatus.COMPLETED if done else TaskStatus.RUNNING,
        result=checkpoint.output if done else None,
        input_request=None,
        note=None,
        done_branches=[],
        awaiting=None,
        wake_at=None if done else checkpoint.wake_at,
        usage=add_usage(record.usage, checkpoint.usage),
        updated_at=now,
        build=record.build or checkpoint.build,
        notes=record.notes + (checkpoint.notes or []),
    )


def runs_step(record: TaskRecord, step: int, generation: int) -> bool:
    """Whether the task, in this run, is at `step` and not over: what a message must name
    before its failure may fail the task."""
    return (
        not record.status.is_terminal
        and record.generation == generation
        and record.current_step == step
    )


def next_work(record: TaskRecord, step: int, output: Any) -> list[WorkMessage]:
    """The messages that hand off `step + 1` of `record` (the plan already extended)."""
    following = step + 1
    if following >= record.plan_length:
        return []
    return step_work(record, following, output)


def current_work(record: TaskRecord, previous_output: Any = None) -> list[WorkMessage]:
    """The messages of the record's current step (first step, resume, retry)."""
    return step_work(record, record.current_step, previous_output)


def step_work(record: TaskRecord, step: int, previous_output: Any) -> list[WorkMessage]:
    """One message for a tool step, one per branch not yet done for a parallel step."""
    spec = record.spec(step)
    if spec.parallel is None:
        return [_work(record, step, spec, None, previous_output)]
    done = set(record.done_branches) if step == record.current_step else set()
    return [
        _work(record, step, branch, index, previous_output)
        for index, branch in enumerate(spec.parallel)
        if index not in done
    ]


def _work(
    record: TaskRecord, step: int, spec: StepSpec, branch: int | None, previous_output: Any
) -> WorkMessage:
    assert spec.tool is not None
    return WorkMessage(
        task_id=record.task_id,
        step=step,
        tool=spec.tool,
        input=previous_output if spec.input is None else spec.input,
        generation=record.generation,
        branch=branch,
    )


def fail(
    record: TaskRecord, step: int | None, error: ErrorInfo, now: datetime
) -> TaskRecord | None:
    if record.status.is_terminal:
        return None
    return msgspec.structs.replace(
        record,
        status=TaskStatus.FAILED,
        error=error,
        failed_step=step,
        input_request=None,
        updated_at=now,
    )


def cancel(record: TaskRecord, now: datetime) -> TaskRecord | None:
    if record.status.is_terminal:
        return None
    return msgspec.structs.replace(
        record, status=TaskStatus.CANCELLED, input_request=None, updated_at=now
    )


def wait_for_input(
    record: TaskRecord, step: int, request: InputRequest, now: datetime
) -> TaskRecord | None:
    if record.status.is_terminal or record.current_step != step:
        return None
    return msgspec.structs.replace(
        record, status=TaskStatus.WAITING, input_request=request, updated_at=now
    )


def retry_from_failure(record: TaskRecord, now: datetime) -> TaskRecord | None:
    """failed → running at the failed step, as a new generation (so its messages are new).
    The step runs again now: the child it awaited (which failed) and the sleep it was in
    are over, so a retried step that started a child starts a new one."""
    if record.status is not TaskStatus.FAILED or record.failed_step is None:
        return None
    return msgspec.structs.replace(
        record,
        status=TaskStatus.RUNNING,
        current_step=record.failed_step,
        error=None,
        failed_step=None,
        awaiting=None,
        wake_at=None,
        generation=record.generation + 1,
        updated_at=now,
    )
