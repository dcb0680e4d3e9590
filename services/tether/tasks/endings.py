"""How a task ends before its last step: it fails or is cancelled, and what follows."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from tether.clock import utcnow
from tether.errors import TaskConflictError
from tether.nats.recent import Versioned
from tether.nats.records import Records
from tether.schemas.events import Cancelled, Failed
from tether.schemas.records import ErrorInfo, TaskRecord, Usage
from tether.tasks import rules
from tether.tasks.usage import add_usage, with_spent

if TYPE_CHECKING:
    from tether.tasks.service import TaskService

Change = Callable[[TaskRecord], TaskRecord | None]


class Endings:
    """`TaskService.endings`: fail a task, say it failed, cancel it."""

    def __init__(self, tasks: TaskService) -> None:
        self.tasks = tasks
        self.store = tasks.store

    async def fail(
        self,
        task_id: str,
        error: ErrorInfo,
        *,
        step: int | None = None,
        branch: int | None = None,
        attempt: int | None = None,
        current: Versioned | None = None,
        usage: Usage | None = None,
    ) -> TaskRecord:
        """Mark the task failed (unless it already ended) and say so (`say_failed`); the
        record keeps the branch and attempt that failed it, for a redelivery to replay,
        and counts what that attempt spent (`usage`) in the same write."""

        def failed(record: TaskRecord) -> TaskRecord | None:
            changed = rules.fail(record, step, error, utcnow())
            if changed is None:
                return None
            return msgspec.structs.replace(
                changed,
                failed_branch=branch,
                failed_attempt=attempt,
                usage=add_usage(changed.usage, usage),
            )

        stored, changed = await self.store.records.update(task_id, failed, current)
        record = stored.record
        if changed:
            await self.say_failed(record)
        return record

    async def say_failed(self, record: TaskRecord) -> None:
        """What follows a failed record's write: emit `failed`; a failed branch also stops
        its running siblings (the notice a cancel sends); a child resumes its parent.

        A redelivery of the message whose attempt failed the task does it again (its
        holder may have died before it did), from the record alone: the event is the
        same, with the same message id, so a repeat within the window is a no-op."""
        branch = record.failed_branch
        await self.tasks.emit(
            Failed,
            record,
            record.failed_step,
            branch=branch,
            attempt=record.failed_attempt,
            error=record.error,
        )
        if branch is not None:
            await self.store.notify_cancelled(record.task_id)
        await self.tasks.children.resume_parent(record)
        await self.tasks.children.cancel_pending(record)

    async def count_spent(self, task_id: str, generation: int, usage: Usage | None) -> None:
        """Add what an attempt spent and no checkpoint keeps (it is retried, or its task
        was cancelled while it ran) to the task's usage (see `usage.with_spent`)."""
        if usage is not None:
            await self.store.records.update(task_id, lambda r: with_spent(r, generation, usage))

    async def cancel(self, task_id: str) -> TaskRecord:
        """Cancel a task that has not ended; workers running one of its steps stop it at
        once (on the notice), or within one heartbeat if they missed the notice."""
        record = await change_or_conflict(
            self.store.records,
            task_id,
            lambda record: rules.cancel(record, utcnow()),
            "already {status}: only unfinished tasks can be cancelled",
        )
        await self.store.notify_cancelled(task_id)
        await self.tasks.emit(Cancelled, record)
        await self.tasks.children.cancel(record)
        await self.tasks.children.resume_parent(record)
        return record


async def change_or_conflict(
    records: Records, task_id: str, change: Change, refusal: str
) -> TaskRecord:
    """Apply `change`, or raise TaskConflictError saying why the task refuses it."""
    stored, changed = await records.update(task_id, change)
    record = stored.record
    if not changed:
        reason = refusal.format(status=record.status.value)
        raise TaskConflictError(task_id, f"task {task_id!r} is {reason}")
    return record
