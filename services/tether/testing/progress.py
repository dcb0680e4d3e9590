"""Which steps a crash test may not see run again: those whose output is stored."""

from __future__ import annotations

from tether.nats.store import Store
from tether.schemas.records import TaskStatus


async def stored_steps(store: Store, task_ids: list[str] | None = None) -> set[tuple[str, int]]:
    """Every (task, step) with a checkpoint, plus the last step of each completed task
    (the record's `result` is that step's checkpoint); only `task_ids` if given."""
    keys = await store.keys(store.names.checkpoints_bucket)
    wanted = None if task_ids is None else set(task_ids)
    steps = set()
    for key in keys:
        task_id, step, *rest = key.split(".")
        if not rest and (wanted is None or task_id in wanted):
            steps.add((task_id, int(step)))
    if task_ids is None:
        records = await store.records.list()
    else:
        found = [await store.records.get(task_id) for task_id in task_ids]
        records = [f.record for f in found if f is not None]
    for record in records:
        if record.status is TaskStatus.COMPLETED:
            steps.add((record.task_id, record.plan_length - 1))
    return steps
