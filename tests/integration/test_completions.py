"""Completions a subscriber can filter on the server (issue 26): a task's end is an empty
core NATS notice on `<prefix>.ended.<task_id>.<status>`, and `handle.wait()` listens for
its own task's notice instead of creating a consumer per wait."""

from __future__ import annotations

import asyncio

import pytest

from tests.apps.tools import app
from tests.conftest import Raw
from tether import Client, NatsConfig, TaskFailedError, Worker
from tether.testing import eventually


async def test_each_end_is_one_notice_on_a_subject_naming_the_task_and_how_it_ended(
    config: NatsConfig, client: Client, raw: Raw
) -> None:
    names = config.names
    nc = raw.nc
    completed = await nc.subscribe(names.ended_subject("*", "completed"))
    everything = await nc.subscribe(names.ended_subject("*", "*"))
    async with Worker(app, config):
        done = [await client.submit(["fast"]) for _ in range(3)]
        broken = await client.submit(["broken"])
        for handle in done:
            await handle.wait(timeout=20)
        with pytest.raises(TaskFailedError):
            await broken.wait(timeout=20)

    async def all_heard() -> None:
        assert everything.pending_msgs == 4

    await eventually(all_heard, timeout=5)
    heard = {(await completed.next_msg(timeout=1)).subject for _ in done}
    assert heard == {names.ended_subject(h.task_id, "completed") for h in done}
    assert completed.pending_msgs == 0  # the failure went only to the wider filter
    subjects = [(await everything.next_msg(timeout=1)).subject for _ in range(4)]
    assert names.ended_subject(broken.task_id, "failed") in subjects


async def test_waiting_for_many_tasks_creates_no_consumer(
    config: NatsConfig, client: Client, raw: Raw
) -> None:
    """Before, each `wait()` followed the record through a KV watch: an ordered consumer
    per waiting task, created again every few seconds."""
    handles = [await client.submit([{"tool": "slow", "input": {"sleep": 0.5}}]) for _ in range(20)]
    waits = [asyncio.ensure_future(h.wait(timeout=30)) for h in handles]
    records = config.names.kv_stream(config.names.tasks_bucket)
    try:
        await eventually(lambda: _all_subscribed(client, 20), timeout=5)
        consumers = await raw.js.consumers_info(records)
        assert consumers == []
        async with Worker(app, config, concurrency=20):
            results = await asyncio.gather(*waits)
    finally:
        for wait in waits:
            wait.cancel()
    assert len(results) == 20


async def _all_subscribed(client: Client, count: int) -> None:
    subscriptions = client._store.nc._subs.values()
    ended = [s for s in subscriptions if ".ended." in s.subject]
    assert len(ended) >= count
