"""Listing from the status index: newest first or in creation order, by status, paged;
a row a task has left is never shown, and a row with no record is skipped."""

from __future__ import annotations

from tests.apps.tools import app
from tests.conftest import MakeWorker, Raw
from tether import Client, Step, TaskStatus
from tether.nats.store import Store
from tether.testing import eventually


async def test_pages_by_status_in_creation_order_and_newest_first(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    done = [f"page-{n}" for n in range(5)]
    for task_id in done:
        await (await client.submit(["fast"], task_id=task_id)).wait(timeout=20)
    waiting = await client.submit(["asks"], task_id="page-waiting")
    await waiting.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=20)

    first, more = await client.list_page("completed", limit=2)
    second, _ = await client.list_page("completed", limit=2, cursor=first[-1].task_id)
    newest, _ = await client.list_page(limit=3, newest_first=True)
    inbox, none_left = await client.list_page(TaskStatus.WAITING)

    assert [r.task_id for r in first] == done[:2] and more
    assert [r.task_id for r in second] == done[2:4]
    assert [r.task_id for r in newest] == ["page-waiting", "page-4", "page-3"]
    assert [r.task_id for r in inbox] == ["page-waiting"] and not none_left


async def test_a_task_that_moves_on_leaves_its_old_row_and_a_stale_row_is_skipped(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([Step(tool="slow", input={"sleep": 30})], task_id="moves")
    await handle.wait_for(lambda r: r.status is TaskStatus.RUNNING, timeout=20)
    await handle.cancel()
    # A row no record backs (a crash between the index and the record, say):
    await raw.nc.publish(store.names.index_subject("cancelled", 1, "ghost"), b"")
    await raw.nc.flush()

    async def moved() -> None:
        rows = await store.records.index_rows("running")
        assert not any(row.endswith(".moves") for row in rows), rows  # expired after 1 s

    await eventually(moved, timeout=10)
    cancelled, _ = await client.list_page("cancelled")
    assert [r.task_id for r in cancelled] == ["moves"]
    assert (await client.list_page("running"))[0] == []
