"""The status events of a task flow, built from its record (pure; `TaskService.emit`
publishes them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from tether.schemas.codec import encode
from tether.schemas.events import AnyStatusEvent, Completed, StepCompleted
from tether.schemas.records import Checkpoint, TaskRecord, TaskStatus

EVENT_OUTPUT_LIMIT = 4096


def event_output(output: Any) -> Any:
    """Outputs ride on events only when small; followers read big ones from the record."""
    size = len(output) if isinstance(output, msgspec.Raw) else len(encode(output))
    return output if size <= EVENT_OUTPUT_LIMIT else None


def task_event(
    kind: type[AnyStatusEvent], record: TaskRecord, step: int | None = None, **fields: Any
) -> AnyStatusEvent:
    """An event of `record`: its status, time and generation, the step's tool, unless
    `fields` say otherwise."""
    fields.setdefault("status", record.status)
    fields.setdefault("time", record.updated_at)
    fields.setdefault("generation", record.generation)
    branch = fields.get("branch")
    in_plan = step is not None and record.has_step(step)
    tool = record.spec(step).branch(branch).tool if in_plan and step is not None else None
    return kind(task_id=record.task_id, step=step, tool=tool, **fields)


def step_completed(
    record: TaskRecord,
    step: int,
    checkpoint: Checkpoint,
    now: datetime,
    *,
    attempt: int | None = None,
    skipped: bool = False,
) -> list[AnyStatusEvent]:
    """`step_completed`, and `completed` when the step was the task's last."""
    said = [
        task_event(
            StepCompleted,
            record,
            step,
            attempt=attempt,
            time=now,
            output=event_output(checkpoint.output),
            skipped=skipped,
            wake_at=record.wake_at,
            usage=checkpoint.usage,
            build=checkpoint.build,
            notes=checkpoint.notes,
        )
    ]
    if record.status is TaskStatus.COMPLETED:
        said.append(task_event(Completed, record, time=now, output=event_output(record.result)))
    return said
