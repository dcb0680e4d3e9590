"""Child task rules (pure, no I/O): a step that starts a task and completes with its result.

`tasks.children` applies them by compare-and-set: the child's id and record, the parent
listing it (`starting`, then `children`) and waiting for it, and what a child that ended
without a result means for its parent's step.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import msgspec

from tether.schemas.failures import FailureType
from tether.schemas.ids import MAX_TASK_ID_LENGTH
from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, ParentStep, TaskRecord, TaskStatus


def child_id(parent: str, step: int, generation: int, branch: int | None = None) -> str:
    """The id of the child task a step (or a branch) starts: the same on every attempt."""
    task_id = f"{parent}-s{step}" if branch is None else f"{parent}-s{step}b{branch}"
    task_id = task_id if generation <= 1 else f"{task_id}-g{generation}"
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
    branch: int | None = None,
    build: str | None = None,
) -> TaskRecord:
    link = ParentStep(
        task_id=parent.task_id,
        step=step,
        generation=parent.generation,
        branch=branch,
        build=build,
    )
    return TaskRecord(
        task_id=task_id,
        status=TaskStatus.PENDING,
        steps=steps,
        metadata=metadata,
        created_at=now,
        updated_at=now,
        deadline_at=parent.deadline_at,  # a child cannot outlive its parent's deadline
        parent=link,
    )


def await_child(
    record: TaskRecord, step: int, child: str, now: datetime, build: str | None = None
) -> TaskRecord | None:
    """The step, run by `build`, waits for `child` (and the task lists it among its
    children); a first step that starts a child started its task on `build`."""
    if record.status.is_terminal or record.current_step != step or record.awaiting == child:
        return None
    status = TaskStatus.RUNNING if record.status is TaskStatus.PENDING else record.status
    return msgspec.structs.replace(
        record,
        awaiting=child,
        children=_with(record.children, child),
        starting=_without(record.starting, child),
        status=status,
        updated_at=now,
        build=record.build or build,
    )


def list_child(record: TaskRecord, child: str, now: datetime) -> TaskRecord | None:
    """The record with `child` among its children (None: listed already). A child can end
    before its parent's step, re-run after a crash, has recorded that it waits for it."""
    if child in record.children:
        return None
    return msgspec.structs.replace(
        record,
        children=[*record.children, child],
        starting=_without(record.starting, child),
        updated_at=now,
    )


def list_starting(record: TaskRecord, child: str, now: datetime) -> TaskRecord | None:
    """The record with `child` among the children being started (None: listed already),
    before the child's record exists."""
    if child in record.children or child in record.starting:
        return None
    return msgspec.structs.replace(record, starting=[*record.starting, child], updated_at=now)


def _with(ids: list[str], one: str) -> list[str]:
    return ids if one in ids else [*ids, one]


def _without(ids: list[str], one: str) -> list[str]:
    return [i for i in ids if i != one]


def awaits(record: TaskRecord, parent: ParentStep) -> bool:
    """Whether `record` (the parent) still waits at the step `parent` names."""
    return (
        not record.status.is_terminal
        and record.current_step == parent.step
        and record.generation == parent.generation
        and (parent.branch is None or parent.branch not in record.done_branches)
    )


def child_failure(child: TaskRecord) -> ErrorInfo | None:
    """What a child that ended without a result means for its parent's step."""
    if child.status is TaskStatus.CANCELLED:
        return ErrorInfo(
            type=FailureType.CHILD_CANCELLED, message=f"child task {child.task_id!r} was cancelled"
        )
    if child.status is TaskStatus.FAILED:
        detail = f"{child.error.type}: {child.error.message}" if child.error else "unknown error"
        return ErrorInfo(
            type=FailureType.CHILD_FAILED, message=f"child task {child.task_id!r} failed: {detail}"
        )
    return None
