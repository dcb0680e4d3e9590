"""Store.keys: a bucket's keys from the stream's subject list, on a real nats-server."""

from __future__ import annotations

from tests.conftest import Raw
from tether import Client
from tether.clock import utcnow
from tether.nats.store import Store
from tether.schemas.records import TaskRecord, TaskStatus


def _record(task_id: str) -> TaskRecord:
    now = utcnow()
    return TaskRecord(
        task_id=task_id, status=TaskStatus.PENDING, steps=[], created_at=now, updated_at=now
    )


async def test_keys_lists_every_key_and_records_skip_deleted_ones(
    client: Client, store: Store, raw: Raw
) -> None:
    assert await store.keys(store.names.tasks_bucket) == []
    for n in range(5):
        assert await store.records.create(_record(f"k-{n}")) is not None
    tasks = await raw.js.key_value(store.names.tasks_bucket)
    await tasks.delete("k-4")

    assert sorted(await store.keys(store.names.tasks_bucket)) == [f"k-{n}" for n in range(5)]
    assert sorted(r.task_id for r in await store.records.list()) == [f"k-{n}" for n in range(4)]
