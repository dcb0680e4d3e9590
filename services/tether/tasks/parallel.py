"""Parallel steps: count each checkpointed branch on the record, and fan in once.

Every branch is a step of its own (message, checkpoint, retries); the record's
`done_branches` counts them by compare-and-set, and whoever sees the set complete
stores the group's checkpoint (the outputs as a list) and completes the step as any
other, so the next step is handed off exactly once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from tether.clock import utcnow
from tether.errors import MessageTooLargeError
from tether.nats.recent import Versioned
from tether.schemas.events import StepCompleted
from tether.schemas.failures import FailureType
from tether.schemas.records import Checkpoint, ErrorInfo, TaskRecord, TaskStatus
from tether.tasks import branch_rules
from tether.tasks.events import event_output

if TYPE_CHECKING:
    from tether.tasks.service import TaskService


@dataclass
class _GroupWrites:
    """This process's writes to one parallel step's record: one at a time, from the last."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    latest: Versioned | None = None
    users: int = 0


class ParallelSteps:
    """The fan-in of `TaskService` (as `tasks.branches`)."""

    def __init__(self, tasks: TaskService) -> None:
        self.tasks = tasks
        self.store = tasks.store
        self._groups: dict[tuple[str, int, int], _GroupWrites] = {}

    async def record(
        self, current: Versioned, step: int, branch: int, checkpoint: Checkpoint, *, attempt: int
    ) -> TaskRecord | None:
        """Checkpoint one branch of a parallel step, count it, and fan in if it was the
        last. The checkpoint is create-only: when two holders of a branch race, the
        first output stored is the branch's, and both count that one."""
        task_id = current.record.task_id
        spec = current.record.spec(step).branch(branch)
        checkpoint = msgspec.structs.replace(checkpoint, spec=spec)
        winner = await self.store.checkpoints.create(task_id, step, checkpoint, branch)
        # The event names the attempt whose output was stored: its streamed text is the branch's.
        return await self.count(current, step, branch, winner, attempt=winner.attempt)

    async def count(
        self,
        current: Versioned,
        step: int,
        branch: int,
        checkpoint: Checkpoint,
        *,
        attempt: int | None = None,
        skipped: bool = False,
    ) -> TaskRecord | None:
        """Add a checkpointed branch to the record's `done_branches`; the holder whose
        write completes the set (or any later holder of a branch, after a crash) fans in.

        Branches that finish together in one process take turns, each starting from the
        record the one before wrote: a hundred compare-and-sets on one key would
        otherwise conflict with each other and retry about n²/2 times.
        """
        record = current.record
        key = (record.task_id, step, record.generation)
        group = self._groups.setdefault(key, _GroupWrites())
        group.users += 1
        try:
            async with group.lock:
                latest = group.latest
                start = latest if latest and latest.revision > current.revision else current
                stored, changed = await self.store.records.update(
                    record.task_id,
                    lambda record: branch_rules.complete_branch(record, step, branch, utcnow()),
                    start,
                )
                group.latest = stored
        finally:
            group.users -= 1
            if not group.users:
                del self._groups[key]
        if changed or branch_rules.branch_counted(stored.record, step, branch):
            # Every delivery that finds the branch counted says so again: its holder may
            # have died between the count and the event; the message id drops a repeat.
            await self.say_completed(stored.record, step, branch, checkpoint, attempt, skipped)
        if branch_rules.all_branches_done(stored.record, step):
            return await self.fan_in(stored, step)
        return stored.record if changed else None

    async def say_completed(
        self,
        record: TaskRecord,
        step: int,
        branch: int,
        checkpoint: Checkpoint,
        attempt: int | None,
        skipped: bool,
    ) -> None:
        """A branch's step_completed (sent again by any later holder: see `count`)."""
        await self.tasks.emit(
            StepCompleted,
            record,
            step,
            branch=branch,
            attempt=attempt,
            output=event_output(checkpoint.output),
            skipped=skipped,
            build=checkpoint.build,
        )

    async def fan_in(self, stored: Versioned, step: int) -> TaskRecord | None:
        """Store the group's checkpoint (its branches' outputs as a list), then complete
        the step as any other: record, then hand off, exactly once by compare-and-set."""
        record = stored.record
        count = len(record.spec(step).parallel or ())
        branches = await asyncio.gather(
            *(self.store.checkpoints.get(record.task_id, step, b) for b in range(count))
        )
        if any(branch is None for branch in branches):  # counted only once checkpointed
            raise RuntimeError(
                f"task {record.task_id!r}, step {step}: a branch checkpoint is missing"
            )
        group = branch_rules.fan_in(
            [b for b in branches if b is not None], record.spec(step), utcnow()
        )
        try:
            winner = await self.store.checkpoints.create(record.task_id, step, group)
        except MessageTooLargeError as exc:
            message = f"the outputs of step {step}'s branches do not fit together: {exc}"
            error = ErrorInfo(type=FailureType.OUTPUT_TOO_LARGE, message=message)
            await self.tasks.endings.fail(record.task_id, error, step=step, current=stored)
            return None
        return await self.tasks.complete_step(stored, step, winner)

    async def replay_fan_in(
        self, record: TaskRecord, step: int, branch: int, mine: Checkpoint | None
    ) -> None:
        """A branch's message after its group completed: say the branch completed (its
        holder may have died between counting it and the event, while the other branches
        completed the group), then replay the hand-off (its holder may have died after
        the record moved and before the next step was published). Message ids make both
        no-ops when they were done. `mine`: the branch's checkpoint, as read."""
        if mine is not None and branch_rules.branch_counted(record, step, branch):
            await self.say_completed(record, step, branch, mine, mine.attempt, skipped=True)
        group = await self.store.checkpoints.get(record.task_id, step)
        if group is None and record.status is TaskStatus.COMPLETED:
            group = Checkpoint(output=record.result, time=record.updated_at)
        if group is not None:
            await self.tasks.replay_hand_off(record, step, group)
