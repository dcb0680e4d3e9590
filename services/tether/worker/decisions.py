"""What to do with a step's message, and after a failed attempt (pure, no I/O).

`decide` is step 2 of the protocol (schemas/README.md): from the task record and the
step's checkpoint, whether to drop the message, replay the hand-off (or the failure),
complete from the checkpoint, leave a waiting task alone, or run the tool. `classify`
and `outcome` are step 5: what an exception from the tool means, and whether to retry
and after how long.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta

from tether.durations import as_timedelta
from tether.errors import RetryableError, TerminalError
from tether.schemas.plans import StepSpec
from tether.schemas.records import Checkpoint, ErrorInfo, TaskRecord, TaskStatus
from tether.schemas.work import WorkMessage
from tether.tasks import branch_rules, rules
from tether.tools.retry import RetryPolicy
from tether.worker import runs

ERROR_MESSAGE_LIMIT = 4096
TRACEBACK_FRAMES = 8
TRACEBACK_LIMIT = 4096
MENDED = "; once that is mended, retry the task: "
"""Where an error that explained itself says how to run its task on (see `tried`)."""


@dataclass(frozen=True)
class Reject:
    """No such task: dead-letter the message."""

    reason: str


@dataclass(frozen=True)
class Drop:
    """A stale duplicate (the task ended, moved on, or is another generation): ack it."""


@dataclass(frozen=True)
class ReplayFailure:
    """The step gave up and failed the task, but its holder may have died before saying
    so: send the record's `failed` again (its message id makes a repeat a no-op), with
    what follows it (the end notice, the siblings' stop, the parent's resume), and ack."""


@dataclass(frozen=True)
class RepublishHandoff:
    """The step was recorded but its holder may have died before handing off: replay it."""

    checkpoint: Checkpoint


@dataclass(frozen=True)
class ReplayFanIn:
    """A branch of a parallel step whose group was recorded: replay the group's hand-off
    (and the branch's event, from its checkpoint as read)."""

    checkpoint: Checkpoint | None = None


@dataclass(frozen=True)
class SayBranchDone:
    """A checkpointed branch of a group the task has moved past: send its step_completed
    again (its holder may have died before it did; a repeat is dropped by message id)."""

    checkpoint: Checkpoint


@dataclass(frozen=True)
class FromCheckpoint:
    """The step ran (or was answered) already: complete it from its checkpoint."""

    checkpoint: Checkpoint


@dataclass(frozen=True)
class Wait:
    """The step asked for input, or a child task runs it; the answer (or the child's end)
    arrives as a message of its own: ack this one."""


@dataclass(frozen=True)
class Execute:
    """Run the tool."""


Decision = (
    Reject
    | Drop
    | ReplayFailure
    | RepublishHandoff
    | ReplayFanIn
    | SayBranchDone
    | FromCheckpoint
    | Wait
    | Execute
)


def decide(
    record: TaskRecord | None, checkpoint: Checkpoint | None, work: WorkMessage, attempt: int = 1
) -> Decision:
    """Step 2 of the protocol, given the record and the step's checkpoint as read, for
    the message's `attempt` (its delivery count plus its prior attempts)."""
    if record is None:
        return Reject(f"no task {work.task_id!r} exists")
    if rules.is_stale(record, work.step, work.generation):
        return _when_stale(record, checkpoint, work, attempt)
    mismatch = _branch_mismatch(record, work)
    if mismatch:
        return Reject(mismatch)
    if record.current_step == work.step + 1:
        if work.branch is not None:
            return ReplayFanIn(checkpoint)
        stored = checkpoint or _result_as_checkpoint(record, work.step)
        if stored is not None:
            return RepublishHandoff(stored)
        # The record moved on but the step's output never landed: run it again.
    if checkpoint is not None:
        return FromCheckpoint(checkpoint)
    if record.status is TaskStatus.WAITING:
        return Wait()
    if record.awaiting is not None and record.current_step == work.step:
        return Wait()  # a child task runs this step; its end resumes it
    return Execute()


def _when_stale(
    record: TaskRecord, checkpoint: Checkpoint | None, work: WorkMessage, attempt: int
) -> Decision:
    """A message the task has nothing left to run for: replay the failure its step wrote,
    say again that its counted branch completed, or drop it."""
    if _failed_by(record, work, attempt):
        return ReplayFailure()
    branch = work.branch
    if branch is not None and checkpoint is not None and work.generation == record.generation:
        if branch_rules.branch_counted(record, work.step, branch):
            return SayBranchDone(checkpoint)
    return Drop()


def _failed_by(record: TaskRecord, work: WorkMessage, attempt: int) -> bool:
    """Whether an attempt of this very step (or branch) failed the task: this message's,
    or an earlier one of the same run. Only such a message may say so again; any other
    (a sibling branch's, one of a task a deadline or a child failed) is stale."""
    return (
        record.status is TaskStatus.FAILED
        and record.generation == work.generation
        and record.failed_step == work.step
        and record.failed_branch == work.branch
        and record.failed_attempt is not None
        and record.failed_attempt <= attempt
    )


def _branch_mismatch(record: TaskRecord, work: WorkMessage) -> str | None:
    """Why a message's `branch` does not fit the step it names (None: it fits)."""
    branches = record.spec(work.step).parallel
    if work.branch is None:
        return None if branches is None else f"step {work.step} is parallel: give a branch"
    if branches is None or work.branch >= len(branches):
        return f"step {work.step} has no branch {work.branch}"
    return None


def _result_as_checkpoint(record: TaskRecord, step: int) -> Checkpoint | None:
    """The last step of a completed task is not checkpointed: its result stands in."""
    if record.status is TaskStatus.COMPLETED and step + 1 == record.plan_length:
        return Checkpoint(output=record.result, time=record.updated_at)
    return None


def step_timeout(
    tool_timeout: timedelta | None, spec: StepSpec, deadline_at: datetime | None, now: datetime
) -> float | None:
    """Seconds an attempt may run: the step's timeout, else the tool's, capped by the
    task's deadline; None for no limit."""
    limits = []
    if spec.timeout_ms is not None:
        limits.append(spec.timeout_ms / 1000)
    elif tool_timeout is not None:
        limits.append(tool_timeout.total_seconds())
    if deadline_at is not None:
        limits.append(max(0.0, (deadline_at - now).total_seconds()))
    return min(limits) if limits else None


@dataclass(frozen=True)
class Failure:
    """A failed attempt: what went wrong, whether another attempt can help, and when."""

    error: ErrorInfo
    retryable: bool
    retry_after: timedelta | None = None
    stops_task: bool = False
    """The tool raised TerminalError: the task fails, even in a group that collects its
    branches' errors (an agent's tool calls), where other errors become results."""
    explained: bool = False
    """The tool raised RetryableError: its message says what passes (a rate limit, a
    model it cannot reach), so a retry of it is logged as one line, without its frames."""


@dataclass(frozen=True)
class Retry:
    delay: timedelta


@dataclass(frozen=True)
class GiveUp:
    error: ErrorInfo


def classify(
    exc: BaseException, *, timed_out: bool, deadline_passed: bool, timeout: float | None
) -> Failure:
    """What an exception out of a tool means for the step; `timed_out`: the step's own
    timeout (or the task deadline) cut it off, as opposed to a TimeoutError the tool raised."""
    if timed_out:
        if deadline_passed:
            return Failure(deadline_exceeded(), retryable=False)
        message = f"step timed out after {timeout or 0:.1f}s"
        return Failure(ErrorInfo(type="StepTimeout", message=message), retryable=True)
    if isinstance(exc, TerminalError):
        return Failure(error_info(exc), retryable=False, stops_task=True)
    if isinstance(exc, RetryableError):
        return Failure(error_info(exc), retryable=True, retry_after=exc.retry_after, explained=True)
    return Failure(error_info(exc), retryable=True)


def outcome(
    failure: Failure, policy: RetryPolicy, attempt: int, rng: random.Random, task_id: str = "ID"
) -> Retry | GiveUp:
    """Retry after the error's own delay or the policy's backoff, or give up for good.
    The error's own delay (a provider's `Retry-After`) is capped by the policy's
    `max_backoff`: a step never sleeps longer between attempts than its policy says."""
    if not failure.retryable:
        return GiveUp(failure.error)
    if not policy.can_retry(attempt):
        error = failure.error
        if failure.explained:
            return GiveUp(tried(policy, error, task_id))
        return GiveUp(exhausted(policy, error.message, error.type, error.traceback))
    if failure.retry_after is None:
        return Retry(policy.backoff(attempt, rng))
    return Retry(min(failure.retry_after, as_timedelta(policy.max_backoff)))


def before_attempt(
    record: TaskRecord, counted: runs.Count, policy: RetryPolicy, now: datetime
) -> GiveUp | None:
    """Give up before running at all: the deadline passed, the step's worker died too
    often while it ran alone, or every attempt charged to it was used."""
    if rules.deadline_passed(record, now):
        return GiveUp(deadline_exceeded())
    if (poison := runs.poisoned(counted, policy.poison_after)) is not None:
        return GiveUp(poison)
    if counted.charged > policy.max_attempts:
        return GiveUp(exhausted(policy, "every attempt was lost to a crash or timeout"))
    return None


def error_info(exc: BaseException) -> ErrorInfo:
    """The error as stored and sent, with where it came from; a huge message is cut so
    the failure itself fits."""
    message = str(exc) or type(exc).__name__
    if len(message) > ERROR_MESSAGE_LIMIT:
        message = message[:ERROR_MESSAGE_LIMIT] + f"… ({len(message):,} characters)"
    return ErrorInfo(type=type(exc).__name__, message=message, traceback=traceback_of(exc))


def traceback_of(exc: BaseException) -> str | None:
    """The innermost `TRACEBACK_FRAMES` frames of `exc`'s traceback, the last
    `TRACEBACK_LIMIT` characters of it (None when it has none)."""
    if exc.__traceback__ is None:
        return None
    lines = traceback.format_exception(exc, limit=-TRACEBACK_FRAMES, chain=False)
    text = "".join(lines).rstrip()
    if len(text) > TRACEBACK_LIMIT:
        text = "…" + text[-TRACEBACK_LIMIT:]
    return text


def deadline_exceeded() -> ErrorInfo:
    return ErrorInfo(type="DeadlineExceeded", message="task deadline exceeded")


def exhausted(
    policy: RetryPolicy, last: str, kind: str = "RetriesExhausted", where: str | None = None
) -> ErrorInfo:
    message = f"gave up after {policy.max_attempts} attempts: {last}"
    return ErrorInfo(type=kind, message=message, traceback=where)


def tried(policy: RetryPolicy, error: ErrorInfo, task_id: str) -> ErrorInfo:
    """An error that explained itself (a model it cannot reach), after its last attempt:
    what happened, how often, and how to run the task on once it is mended, under its
    own type (not "RetryableError: gave up after ...")."""
    message = (
        f"{error.message} ({policy.max_attempts} attempts){MENDED}'tether dlq retry {task_id}', "
        "or Retry on its page in the dashboard"
    )
    return ErrorInfo(type=error.type, message=message, traceback=error.traceback)
