"""Parallel step rules (pure, no I/O): branches counted as they are checkpointed, and the
group's output once the last one is (`tasks.parallel` applies them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from tether.schemas.plans import StepSpec
from tether.schemas.records import Checkpoint, ErrorInfo, TaskRecord, TaskStatus
from tether.tasks.usage import add_usage


def complete_branch(record: TaskRecord, step: int, branch: int, now: datetime) -> TaskRecord | None:
    """Count one checkpointed branch of the current (parallel) step; None if counted."""
    if record.status.is_terminal or record.current_step != step or branch in record.done_branches:
        return None
    done = sorted([*record.done_branches, branch])
    status = TaskStatus.RUNNING if record.status is TaskStatus.PENDING else record.status
    return msgspec.structs.replace(
        record, done_branches=done, status=status, note=None, updated_at=now
    )


def branch_counted(record: TaskRecord, step: int, branch: int) -> bool:
    """Whether the record counts `branch` of `step` as done: in `done_branches` while the
    step runs, and every branch once the task has moved past the step. A run that
    failed or was cancelled counts nothing more (its events say how it ended)."""
    if record.status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        return False
    if record.current_step == step:
        return branch in record.done_branches
    return record.current_step > step


def all_branches_done(record: TaskRecord, step: int) -> bool:
    """True when every branch of `step` is checkpointed and the step is not yet complete:
    the fan-in is due (whoever sees this may do it; doing it twice is harmless)."""
    if record.status.is_terminal or record.current_step != step:
        return False
    branches = record.spec(step).parallel
    return branches is not None and len(record.done_branches) == len(branches)


def fan_in(branches: Sequence[Checkpoint], group: StepSpec, now: datetime) -> Checkpoint:
    """A parallel step's checkpoint: its branches' outputs as a list, in branch order,
    and the model tokens they spent."""
    usage = None
    for branch in branches:
        usage = add_usage(usage, branch.usage)
    outputs = [branch.output for branch in branches]
    return Checkpoint(output=outputs, time=now, spec=group, usage=usage)


def branch_error(error: ErrorInfo) -> dict[str, Any]:
    """What a branch that failed for good leaves in a group that collects errors."""
    return {"error": {"type": error.type, "message": error.message}}
