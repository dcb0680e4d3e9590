"""The whole plan of a task, and forks: a task run again from one of its steps."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.clock import utcnow
from tether.errors import TaskConflictError, TaskExistsError
from tether.schemas.events import Submitted
from tether.schemas.plans import StepSpec
from tether.schemas.records import Checkpoint, TaskRecord
from tether.tasks import rules

if TYPE_CHECKING:
    from tether.nats.store import Store
    from tether.tasks.service import TaskService


class Forks:
    """`TaskService.forks`: read a task's history, start a fork of it."""

    def __init__(self, tasks: TaskService) -> None:
        self.tasks = tasks
        self.store = tasks.store

    async def plan(self, record: TaskRecord) -> list[StepSpec]:
        return await full_plan(self.store, record)

    async def _checkpoints(self, task_id: str, steps: int) -> list[Checkpoint | None]:
        return await _checkpoints(self.store, task_id, steps)

    async def fork(
        self, task_id: str, from_step: int, new_task_id: str, new_input: Any = None
    ) -> TaskRecord:
        """Start `new_task_id` as a copy of `task_id` that runs again from `from_step`:
        the checkpoints before it are copied (those steps do not run), the rest runs."""
        source = (await self.store.records.require(task_id)).record
        history = await self._checkpoints(task_id, source.plan_length)  # read once
        plan = _plan(source, history[: source.done_steps])
        added = {
            step: len(found.next_steps)
            for step, found in enumerate(history)
            if step >= from_step and found is not None and found.next_steps
        }
        plan = rules.plan_before(plan, added)  # the re-run steps will add their own
        record = rules.forked(source, plan, from_step, new_task_id, utcnow(), new_input)
        if await self.store.records.get(new_task_id) is not None:
            raise TaskExistsError(new_task_id)
        earlier = history[:from_step]
        if any(checkpoint is None for checkpoint in earlier):
            raise TaskConflictError(
                task_id, f"task {task_id!r} lacks a checkpoint before step {from_step}"
            )
        await asyncio.gather(
            *(
                self.store.checkpoints.create(new_task_id, step, checkpoint)
                for step, checkpoint in enumerate(earlier)
                if checkpoint is not None
            )
        )
        if await self.store.records.create(record) is None:
            raise TaskExistsError(new_task_id)
        previous = earlier[-1].output if earlier and earlier[-1] else None
        await self.tasks.emit(Submitted, record)
        await self.tasks.publish(rules.current_work(record, previous))
        return record


def _plan(record: TaskRecord, finished: list[Checkpoint | None]) -> list[StepSpec]:
    """The steps the record let go of (from their checkpoints), then its own."""
    history = [found.spec if found and found.spec else StepSpec(tool="?") for found in finished]
    return history + record.steps


async def full_plan(store: Store, record: TaskRecord) -> list[StepSpec]:
    """The whole plan: the steps the record let go of, from their checkpoints, then the
    record's own."""
    return _plan(record, await _checkpoints(store, record.task_id, record.done_steps))


async def _checkpoints(store: Store, task_id: str, steps: int) -> list[Checkpoint | None]:
    return list(await asyncio.gather(*(store.checkpoints.get(task_id, i) for i in range(steps))))
