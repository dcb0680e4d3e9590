"""Task state changes that end or pause a task: fail, cancel, wait for input, answer."""

from __future__ import annotations

from typing import Any

from tether.engine import transitions
from tether.engine.conformance import check_answer
from tether.engine.transitions import utcnow
from tether.errors import TaskConflictError
from tether.nats.store import Store, Versioned
from tether.schemas.events import Cancelled, Failed, StepRetrying, Waiting
from tether.schemas.tasks import (
    Checkpoint,
    DeadLetter,
    ErrorInfo,
    InputRequest,
    TaskRecord,
    TaskStatus,
)

DEAD_LETTER_DATA_LIMIT = 64 * 1024


async def fail_task(
    store: Store,
    task_id: str,
    error: ErrorInfo,
    *,
    step: int | None = None,
    attempt: int | None = None,
    current: Versioned | None = None,
) -> TaskRecord:
    """Mark the task failed (unless it already ended) and emit `failed`."""
    stored, changed = await store.update_record(
        task_id, lambda record: transitions.fail(record, step, error, utcnow()), current
    )
    record = stored.record
    if changed:
        tool = record.steps[step].tool if step is not None and step < len(record.steps) else None
        await store.emit(
            Failed(
                task_id=task_id,
                status=TaskStatus.FAILED,
                step=step,
                tool=tool,
                attempt=attempt,
                time=record.updated_at,
                error=error,
            ),
            record.generation,
        )
    return record


async def dead_letter(
    store: Store,
    *,
    tool: str,
    subject: str,
    data: bytes,
    error: ErrorInfo,
    task_id: str | None = None,
    step: int | None = None,
    attempt: int = 0,
) -> None:
    await store.dead_letter(
        DeadLetter(
            tool=tool,
            task_id=task_id,
            step=step,
            attempt=attempt,
            error=error,
            subject=subject,
            data=data[:DEAD_LETTER_DATA_LIMIT],
            size=len(data),
            time=utcnow(),
        )
    )


async def cancel_task(store: Store, task_id: str) -> TaskRecord:
    """Cancel a task that has not ended; workers running one of its steps stop it at once
    (on the notice), or within one heartbeat if they missed the notice."""
    stored, changed = await store.update_record(
        task_id, lambda record: transitions.cancel(record, utcnow())
    )
    record = stored.record
    if not changed:
        raise TaskConflictError(
            task_id,
            f"task {task_id!r} is already {record.status.value}: "
            "only unfinished tasks can be cancelled",
        )
    await store.notify_cancelled(task_id)
    await store.emit(
        Cancelled(task_id=task_id, status=TaskStatus.CANCELLED, time=record.updated_at),
        record.generation,
    )
    return record


async def wait_for_input(
    store: Store, current: Versioned, step: int, request: InputRequest, attempt: int
) -> TaskRecord | None:
    stored, changed = await store.update_record(
        current.record.task_id,
        lambda record: transitions.wait_for_input(record, step, request, utcnow()),
        current,
    )
    if not changed:
        return None
    record = stored.record
    await store.emit(
        Waiting(
            task_id=record.task_id,
            status=TaskStatus.WAITING,
            step=step,
            tool=record.steps[step].tool,
            attempt=attempt,
            time=record.updated_at,
            input_request=request,
        ),
        record.generation,
    )
    return record


async def send_input(store: Store, task_id: str, data: Any) -> TaskRecord:
    """Answer a waiting task: the answer becomes the waiting step's output.

    The answer is stored create-only as the step's checkpoint, then a resume message
    goes to the step's tool; the worker that takes it finds the checkpoint and hands
    off the next step, so the step that asked never runs again.
    """
    found = await store.require_record(task_id)
    record = found.record
    if record.status is not TaskStatus.WAITING:
        raise TaskConflictError(
            task_id, f"task {task_id!r} is {record.status.value}, not waiting for input"
        )
    if record.input_request is not None:
        check_answer(task_id, record.input_request, data)
    step = record.current_step
    answer = Checkpoint(output=data, time=utcnow())
    stored = await store.create_checkpoint(task_id, step, answer)
    if stored != answer and stored.output != data:
        raise TaskConflictError(task_id, f"task {task_id!r} has already been answered")
    work = transitions.current_work(record)
    await store.publish_work(work, store.names.resume_msg_id(task_id, step, record.generation))
    return record


async def retry_task(store: Store, task_id: str) -> TaskRecord:
    """Run a failed task again from the step that failed; earlier checkpoints are reused."""
    stored, changed = await store.update_record(
        task_id, lambda record: transitions.retry_from_failure(record, utcnow())
    )
    record = stored.record
    if not changed:
        raise TaskConflictError(
            task_id,
            f"task {task_id!r} is {record.status.value}: only a task that failed at a step "
            "can be retried",
        )
    step = record.current_step
    previous = await store.get_checkpoint(task_id, step - 1) if step > 0 else None
    spec = record.steps[step]
    work = transitions.current_work(record, previous.output if previous else None)
    await store.emit(
        StepRetrying(
            task_id=task_id,
            status=TaskStatus.RUNNING,
            step=step,
            tool=spec.tool,
            time=record.updated_at,
        ),
        record.generation,
    )
    await store.publish_work(work, store.names.step_msg_id(task_id, step, record.generation))
    return record
