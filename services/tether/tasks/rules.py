"""Task rules (pure, no I/O): how a record changes, what runs next, what a plan may be.

Every change to a task is one of these functions applied by compare-and-set
(`TaskService`); the checks of a submitted plan are shared by the dispatcher, the
client, the API and the gateway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tether.errors import InvalidTaskError
from tether.schemas.ids import (
    MAX_TASK_ID_LENGTH,
    InvalidNameError,
    validate_task_id,
    validate_tool_name,
)
from tether.schemas.tasks import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    MAX_BRANCHES,
    MAX_DURATION_MS,
    MAX_STEPS,
    Checkpoint,
    ErrorInfo,
    InputRequest,
    ParentStep,
    StepSpec,
    TaskRecord,
    TaskStatus,
    TaskSubmit,
    Timer,
    WorkMessage,
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_record(submit: TaskSubmit, now: datetime, submit_seq: int = 0) -> TaskRecord:
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
    )


def plan_before(plan: list[StepSpec], added: dict[int, int]) -> list[StepSpec]:
    """`plan` without the steps that steps `added` inserted (step -> how many, right
    after it), latest first, so steps inserted by inserted steps go too."""
    steps = list(plan)
    for step in sorted(added, reverse=True):
        del steps[step + 1 : step + 1 + added[step]]
    return steps


def child_id(parent: str, step: int, generation: int) -> str:
    """The id of the child task a step starts: the same on every attempt of the step."""
    task_id = f"{parent}-s{step}" if generation <= 1 else f"{parent}-s{step}-g{generation}"
    if len(task_id) <= MAX_TASK_ID_LENGTH:
        return task_id
    return "child-" + hashlib.sha256(task_id.encode()).hexdigest()[:40]


def new_child(
    parent: TaskRecord,
    step: int,
    task_id: str,
    steps: list[StepSpec],
    metadata: dict[str, Any],
    now: datetime,
) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        status=TaskStatus.PENDING,
        steps=steps,
        metadata=metadata,
        created_at=now,
        updated_at=now,
        deadline_at=parent.deadline_at,  # a child cannot outlive its parent's deadline
        parent=ParentStep(task_id=parent.task_id, step=step, generation=parent.generation),
    )


def await_child(record: TaskRecord, step: int, child: str, now: datetime) -> TaskRecord | None:
    """The step waits for `child` (and the task lists it among its children)."""
    if record.status.is_terminal or record.current_step != step or record.awaiting == child:
        return None
    children = record.children if child in record.children else [*record.children, child]
    status = TaskStatus.RUNNING if record.status is TaskStatus.PENDING else record.status
    return msgspec.structs.replace(
        record, awaiting=child, children=children, status=status, updated_at=now
    )


def awaits(record: TaskRecord, parent: ParentStep) -> bool:
    """Whether `record` (the parent) still waits at the step `parent` names."""
    return (
        not record.status.is_terminal
        and record.current_step == parent.step
        and record.generation == parent.generation
    )


def child_failure(child: TaskRecord) -> ErrorInfo | None:
    """What a child that ended without a result means for its parent's step."""
    if child.status is TaskStatus.CANCELLED:
        return ErrorInfo(
            type="ChildCancelled", message=f"child task {child.task_id!r} was cancelled"
        )
    if child.status is TaskStatus.FAILED:
        detail = f"{child.error.type}: {child.error.message}" if child.error else "unknown error"
        return ErrorInfo(
            type="ChildFailed", message=f"child task {child.task_id!r} failed: {detail}"
        )
    return None


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
        return ErrorInfo(type="DeadlineExceeded", message=f"the task's deadline passed at {at}")
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
        type="InputExpired",
        message=f"no answer to {request.prompt!r} by {request.expires_at.isoformat()}",
    )


def start_step(record: TaskRecord, step: int, now: datetime) -> TaskRecord | None:
    """pending → running when the first step starts; no write for later steps."""
    if record.status is not TaskStatus.PENDING or record.current_step != step:
        return None
    return msgspec.structs.replace(record, status=TaskStatus.RUNNING, updated_at=now)


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
        done_branches=[],
        awaiting=None,
        wake_at=None if done else checkpoint.wake_at,
        updated_at=now,
    )


def complete_branch(record: TaskRecord, step: int, branch: int, now: datetime) -> TaskRecord | None:
    """Count one checkpointed branch of the current (parallel) step; None if counted."""
    if record.status.is_terminal or record.current_step != step or branch in record.done_branches:
        return None
    done = sorted([*record.done_branches, branch])
    status = TaskStatus.RUNNING if record.status is TaskStatus.PENDING else record.status
    return msgspec.structs.replace(record, done_branches=done, status=status, updated_at=now)


def all_branches_done(record: TaskRecord, step: int) -> bool:
    """True when every branch of `step` is checkpointed and the step is not yet complete:
    the fan-in is due (whoever sees this may do it; doing it twice is harmless)."""
    if record.status.is_terminal or record.current_step != step:
        return False
    branches = record.spec(step).parallel
    return branches is not None and len(record.done_branches) == len(branches)


def fan_in(branches: Sequence[Checkpoint], group: StepSpec, now: datetime) -> Checkpoint:
    """A parallel step's checkpoint: its branches' outputs as a list, in branch order."""
    return Checkpoint(output=[branch.output for branch in branches], time=now, spec=group)


def branch_error(error: ErrorInfo) -> dict[str, Any]:
    """What a branch that failed for good leaves in a group that collects errors."""
    return {"error": {"type": error.type, "message": error.message}}


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
    """failed → running at the failed step, as a new generation (so its messages are new)."""
    if record.status is not TaskStatus.FAILED or record.failed_step is None:
        return None
    return msgspec.structs.replace(
        record,
        status=TaskStatus.RUNNING,
        current_step=record.failed_step,
        error=None,
        failed_step=None,
        generation=record.generation + 1,
        updated_at=now,
    )


MAX_DEADLINE_MS = MAX_DURATION_MS


def validate_submit(submit: TaskSubmit) -> None:
    """Raise InvalidTaskError saying what is wrong with the task."""
    try:
        validate_task_id(submit.task_id)
    except InvalidNameError as exc:
        raise InvalidTaskError(str(exc)) from exc
    if not submit.steps:
        raise InvalidTaskError(f"task {submit.task_id!r} has no steps: give at least one")
    if len(submit.steps) > MAX_STEPS:
        raise InvalidTaskError(
            f"task {submit.task_id!r} has {len(submit.steps)} steps; the limit is {MAX_STEPS}"
        )
    validate_steps(submit.steps, f"task {submit.task_id!r}")
    if submit.deadline_ms is not None and not 0 < submit.deadline_ms <= MAX_DEADLINE_MS:
        raise InvalidTaskError(
            f"task {submit.task_id!r}: deadline_ms must be between 1 and {MAX_DEADLINE_MS}"
        )


def validate_steps(steps: Sequence[StepSpec], where: str, first: int = 0) -> None:
    """Check each step's tool name and overrides; `where` prefixes the error message."""
    for index, spec in enumerate(steps, start=first):
        if spec.parallel is None:
            _validate_tool_step(spec, f"{where}, step {index}")
            continue
        own = (spec.tool, spec.input, spec.timeout_ms, spec.retry)
        if any(value is not None for value in own):
            raise InvalidTaskError(
                f"{where}, step {index}: a parallel group takes only 'parallel' and "
                "'collect_errors'; put tool, input, timeout_ms and retry on its branches"
            )
        if not 1 <= len(spec.parallel) <= MAX_BRANCHES:
            raise InvalidTaskError(
                f"{where}, step {index}: a parallel group has 1 to {MAX_BRANCHES} branches"
            )
        for branch, branch_spec in enumerate(spec.parallel):
            if branch_spec.parallel is not None:
                raise InvalidTaskError(
                    f"{where}, step {index}, branch {branch}: groups do not nest; "
                    "run the inner group as a step of its own"
                )
            _validate_tool_step(branch_spec, f"{where}, step {index}, branch {branch}")


def tools_of(steps: Sequence[StepSpec]) -> set[str]:
    """Every tool a plan names, its branches' included."""
    specs = [branch for spec in steps for branch in (spec.parallel or [spec])]
    return {spec.tool for spec in specs if spec.tool is not None}


def _validate_tool_step(spec: StepSpec, where: str) -> None:
    if spec.tool is None:
        raise InvalidTaskError(f"{where}: give a 'tool' (or 'parallel': a list of steps)")
    if spec.collect_errors:
        raise InvalidTaskError(f"{where}: 'collect_errors' belongs on a parallel group")
    try:
        validate_tool_name(spec.tool)
    except InvalidNameError as exc:
        raise InvalidTaskError(f"{where}: {exc}") from exc
    problem = _override_problem(spec)
    if problem:
        raise InvalidTaskError(f"{where} ({spec.tool}): {problem}")


def _override_problem(spec: StepSpec) -> str | None:
    if spec.timeout_ms is not None:
        if spec.timeout_ms <= 0:
            return "timeout_ms must be positive"
        if spec.timeout_ms > MAX_DURATION_MS:
            return f"timeout_ms must be at most {MAX_DURATION_MS} (a year and a day)"
    retry = spec.retry
    if retry is None:
        return None
    if retry.max_attempts is not None and not 1 <= retry.max_attempts <= MAX_ATTEMPTS:
        return f"retry.max_attempts must be between 1 and {MAX_ATTEMPTS}"
    for name in ("initial_backoff_ms", "max_backoff_ms"):
        value = getattr(retry, name)
        if value is not None and not 0 <= value <= MAX_BACKOFF_MS:
            return f"retry.{name} must be between 0 and {MAX_BACKOFF_MS} (one day)"
    return None


def to_step(step: StepSpec | dict[str, Any] | str) -> StepSpec:
    """Accept a StepSpec, a `{"tool": ..., "input": ...}` dict or a bare tool name."""
    if isinstance(step, StepSpec):
        return step
    if isinstance(step, str):
        return StepSpec(tool=step)
    try:
        spec = msgspec.convert(step, StepSpec)
    except msgspec.ValidationError as exc:
        raise InvalidTaskError(f"invalid step {step!r}: {exc}") from exc
    if spec.tool is None and spec.parallel is None:
        raise InvalidTaskError(f"invalid step {step!r}: give a 'tool' (or 'parallel': steps)")
    return spec


def Parallel(*branches: StepSpec | dict[str, Any] | str, collect_errors: bool = False) -> StepSpec:
    """A parallel step: its branches run at once, on any workers, and the next step gets
    their outputs as a list in branch order (`collect_errors`: a branch that fails for
    good leaves `{"error": {...}}` in its place instead of failing the task)."""
    return StepSpec(
        parallel=[to_step(branch) for branch in branches], collect_errors=collect_errors
    )


def task_id_of(data: bytes) -> str | None:
    """The task id of an undecodable submission, if it has a usable one."""
    try:
        raw = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    task_id = raw.get("task_id") if isinstance(raw, dict) else None
    try:
        return validate_task_id(task_id)
    except InvalidNameError:
        return None
