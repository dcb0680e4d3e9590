"""Record a completed step, then hand off the next one: the protocol's steps 4 and 5.

The checkpoint and the record move first, then the next step's message is published.
That way a worker that receives step i+1 always reads a record that has reached it,
and a holder of step i that crashed after recording finds `current_step == i + 1`
and re-publishes the hand-off, which `Nats-Msg-Id` turns into a no-op if it happened.
The checkpoint and the record's compare-and-set are in flight together: a record that
moved past a step whose checkpoint did not land makes the step run again (the worker
treats "no checkpoint" as "not done"), so no output is ever skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from tether.engine import transitions
from tether.engine.transitions import utcnow
from tether.nats.store import Store, Versioned
from tether.schemas.codec import encode
from tether.schemas.events import Completed, StepCompleted, Submitted
from tether.schemas.tasks import Checkpoint, TaskRecord, TaskStatus

EVENT_OUTPUT_LIMIT = 4096


def event_output(output: Any) -> Any:
    """Outputs ride on events only when small; followers read big ones from the record."""
    size = len(output) if isinstance(output, msgspec.Raw) else len(encode(output))
    return output if size <= EVENT_OUTPUT_LIMIT else None


async def record_step(
    store: Store, current: Versioned, step: int, checkpoint: Checkpoint, *, attempt: int
) -> TaskRecord | None:
    """Checkpoint a step that just ran and complete it (see `complete_step`).

    The last step of a plan is not checkpointed: the record's compare-and-set that
    completes the task stores its output as `result`, which stands in for it.
    """
    task_id = current.record.task_id
    if step + 1 == len(current.record.steps) and not checkpoint.next_steps:
        stored, changed = await _advance(store, current, step, checkpoint)
        if not changed and stored.record.status is TaskStatus.COMPLETED:
            checkpoint = msgspec.structs.replace(checkpoint, output=stored.record.result)
        return await _hand_off_after(
            store, stored, changed, step, checkpoint, attempt, skipped=False
        )
    stored_checkpoint = asyncio.ensure_future(store.create_checkpoint(task_id, step, checkpoint))
    try:
        stored, changed = await _advance(store, current, step, checkpoint)
    finally:
        winner = await stored_checkpoint
    if winner is not checkpoint and changed:
        # Another run of this step checkpointed first: its output is the step's.
        redone = transitions.complete_step(current.record, step, winner, utcnow())
        stored, changed = await store.update_record(
            task_id, lambda record: redone if record == stored.record else None, stored
        )
    return await _hand_off_after(store, stored, changed, step, winner, attempt, skipped=False)


async def complete_step(
    store: Store,
    current: Versioned,
    step: int,
    checkpoint: Checkpoint,
    *,
    attempt: int | None = None,
    skipped: bool = False,
) -> TaskRecord | None:
    """Record `step` as done and hand off what follows; None if the task moved on without us."""
    stored, changed = await _advance(store, current, step, checkpoint)
    return await _hand_off_after(store, stored, changed, step, checkpoint, attempt, skipped)


async def _advance(
    store: Store, current: Versioned, step: int, checkpoint: Checkpoint
) -> tuple[Versioned, bool]:
    return await store.update_record(
        current.record.task_id,
        lambda record: transitions.complete_step(record, step, checkpoint, utcnow()),
        current,
    )


async def _hand_off_after(
    store: Store,
    stored: Versioned,
    changed: bool,
    step: int,
    checkpoint: Checkpoint,
    attempt: int | None,
    skipped: bool,
) -> TaskRecord | None:
    record = stored.record
    if not changed and record.current_step != step + 1:
        return None  # cancelled or failed meanwhile, or a stale duplicate
    # The record has moved. Progress events do not wait for a PubAck, so emitting
    # first costs the hand-off nothing (and saves gathering them as tasks).
    await emit_step_completed(store, record, step, checkpoint, attempt=attempt, skipped=skipped)
    await hand_off_next(store, record, step, checkpoint)
    return record


async def emit_step_completed(
    store: Store,
    record: TaskRecord,
    step: int,
    checkpoint: Checkpoint,
    *,
    attempt: int | None = None,
    skipped: bool = False,
) -> None:
    now = utcnow()
    await store.emit(
        StepCompleted(
            task_id=record.task_id,
            status=record.status,
            step=step,
            tool=record.steps[step].tool,
            attempt=attempt,
            time=now,
            output=event_output(checkpoint.output),
            skipped=skipped,
        ),
        record.generation,
    )
    if record.status is TaskStatus.COMPLETED:
        await store.emit(
            Completed(
                task_id=record.task_id,
                status=record.status,
                time=now,
                output=event_output(record.result),
            ),
            record.generation,
        )


async def hand_off_next(
    store: Store, record: TaskRecord, step: int, checkpoint: Checkpoint
) -> None:
    work = transitions.next_work(record, step, checkpoint.output)
    if work is not None:
        msg_id = store.names.step_msg_id(work.task_id, work.step, work.generation)
        await store.publish_work(work, msg_id)


async def hand_off_first(store: Store, record: TaskRecord) -> None:
    """Emit `submitted` and publish the first step (both idempotent on a replay)."""
    work = transitions.current_work(record)
    await store.emit(
        Submitted(task_id=record.task_id, status=TaskStatus.PENDING, time=record.created_at),
        record.generation,
    )
    msg_id = store.names.step_msg_id(work.task_id, work.step, work.generation)
    await store.publish_work(work, msg_id)
