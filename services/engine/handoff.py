"""Record a completed step, then hand off the next one: the protocol's steps 4 and 5.

The record moves first (compare-and-set), then the next step's message is published.
That way a worker that receives step i+1 always reads a record that has reached it,
and a holder of step i that crashed after recording finds `current_step == i + 1`
and re-publishes the hand-off, which `Nats-Msg-Id` turns into a no-op if it happened.
"""

from __future__ import annotations

import asyncio
from typing import Any

from schemas.codec import encode
from schemas.events import AnyStatusEvent, Completed, StepCompleted, Submitted
from schemas.tasks import Checkpoint, TaskRecord, TaskStatus
from services.engine import transitions
from services.engine.transitions import utcnow
from services.nats.store import Store, Versioned

EVENT_OUTPUT_LIMIT = 4096


def event_output(output: Any) -> Any:
    """Outputs ride on events only when small; followers read big ones from the record."""
    return output if len(encode(output)) <= EVENT_OUTPUT_LIMIT else None


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
    stored, changed = await store.update_record(
        current.record.task_id,
        lambda record: transitions.complete_step(record, step, checkpoint, utcnow()),
        current,
    )
    record = stored.record
    if not changed and record.current_step != step + 1:
        return None  # cancelled or failed meanwhile, or a stale duplicate
    # The record has moved: the events and the next step's message can go out together.
    await asyncio.gather(
        emit_step_completed(store, record, step, checkpoint, attempt=attempt, skipped=skipped),
        hand_off_next(store, record, step, checkpoint),
    )
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
    events: list[AnyStatusEvent] = [
        StepCompleted(
            task_id=record.task_id,
            status=record.status,
            step=step,
            tool=record.steps[step].tool,
            attempt=attempt,
            time=now,
            output=event_output(checkpoint.output),
            skipped=skipped,
        )
    ]
    if record.status is TaskStatus.COMPLETED:
        events.append(
            Completed(
                task_id=record.task_id,
                status=record.status,
                time=now,
                output=event_output(record.result),
            )
        )
    await asyncio.gather(*(store.emit(event, record.generation) for event in events))


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
    await asyncio.gather(
        store.emit(
            Submitted(task_id=record.task_id, status=TaskStatus.PENDING, time=record.created_at),
            record.generation,
        ),
        store.publish_work(work, store.names.step_msg_id(work.task_id, work.step, work.generation)),
    )
