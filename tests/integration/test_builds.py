"""Builds: a worker names the build of the code it runs, and every step it runs says so,
in its checkpoint and its events; the task's record names the build that started it."""

from __future__ import annotations

import uuid

from tests.apps.tools import app as tools
from tether import Client, NatsConfig, TaskStatus, Worker
from tether.schemas import StepCompleted, StepStarted


async def test_each_step_names_the_build_that_ran_it_across_a_deploy(
    client: Client, dispatcher: object, config: NatsConfig
) -> None:
    task_id = f"deploy-{uuid.uuid4().hex[:8]}"
    handle = await client.submit(["fast", "asks", "fast"], task_id=task_id)
    async with Worker(tools, config, build="v1"):
        await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=20)
    async with Worker(tools, config, build="v2"):  # v1 is gone: the deploy happened
        await handle.send_input({"approved": True})
        await handle.wait(timeout=20)

    record = await handle.get()
    assert record.build == "v1"  # the build that started it
    built = [await client._store.checkpoints.get(task_id, step) for step in range(2)]
    assert [c.build if c else "missing" for c in built] == ["v1", None]  # step 1: an answer
    events = [e async for e in handle.events(timeout=5)]
    started = [(e.step, e.build) for e in events if isinstance(e, StepStarted)]
    completed = [(e.step, e.build) for e in events if isinstance(e, StepCompleted)]
    assert started == [(0, "v1"), (1, "v1"), (2, "v2")]
    assert completed == [(0, "v1"), (1, None), (2, "v2")]
