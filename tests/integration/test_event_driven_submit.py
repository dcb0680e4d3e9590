"""A task published before any worker serves its tool is kept, pending, saying why, and
runs when a worker starts (as a queue holds work for a consumer that is not up yet)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.apps.tools import app
from tests.conftest import Raw
from tether import Client, InvalidTaskError, NatsConfig, Worker
from tether.clock import utcnow
from tether.nats.store import Store
from tether.schemas import Submitted, TaskStatus, ToolInfo
from tether.tasks.known_tools import FORGET_AFTER
from tether.testing import eventually


async def test_a_task_published_before_its_worker_starts_waits_and_then_completes(
    client: Client, store: Store, raw: Raw, dispatcher: object, config: NatsConfig
) -> None:
    names = store.names
    task = {
        "task_id": "early-bird",
        "steps": [{"tool": "fast", "input": {"n": 1}}, {"tool": "fast"}],
    }
    await raw.js.publish(
        names.submit_subject("early-bird"), json.dumps(task).encode()
    )  # any language

    async def pending() -> None:
        found = await store.records.get("early-bird")
        assert found is not None
        record = found.record
        assert record.status is TaskStatus.PENDING
        assert record.note == "no worker serves 'fast' yet: the task starts when one does"

    await eventually(pending, timeout=10)
    handle = client.handle("early-bird")
    first = await anext(handle.events(timeout=5))
    assert isinstance(first, Submitted) and first.note is not None and "'fast'" in first.note

    async with Worker(app, config):  # the worker comes up later
        result = await handle.wait(timeout=20)
    assert result == {"step": 1, "payload": {"step": 0, "payload": {"n": 1}}}
    assert (await handle.get()).note is None  # said while it waited, gone once it ran


async def test_strict_refuses_a_tool_no_worker_serves_and_the_sdk_keeps_it_by_default(
    client: Client, dispatcher: object
) -> None:
    with pytest.raises(InvalidTaskError, match="unknown tool 'not_yet'"):
        await client.submit(["not_yet"], strict=True)

    kept = await client.submit(["not_yet", "fast"])

    record = await kept.get()
    assert record.status is TaskStatus.PENDING
    assert record.note == "no worker serves 'fast', 'not_yet' yet: the task starts when one does"
    await kept.cancel()  # a task that waits can still be cancelled
    assert (await kept.get()).status is TaskStatus.CANCELLED


async def test_a_tool_no_worker_has_served_for_a_day_is_no_longer_known(
    client: Client, store: Store, dispatcher: object, config: NatsConfig
) -> None:
    stale = ToolInfo(name="retired", updated_at=utcnow() - FORGET_AFTER - timedelta(minutes=1))
    await store.tools.register(stale)
    with pytest.raises(InvalidTaskError, match="unknown tool 'retired'"):
        await client.submit(["retired"], strict=True)

    async with Worker(app, config):  # a live worker's tools are known however old
        await store.tools.register(ToolInfo(name="fast", updated_at=utcnow() - 2 * FORGET_AFTER))
        handle = await client.submit(["fast"], strict=True)
        assert await handle.wait(timeout=20) == {"step": 0, "payload": None}
