"""Builds: a worker names the build of the code it runs, and every step it runs says so,
in its checkpoint and its events; the task's record names the build that started it."""

from __future__ import annotations

import logging
import uuid

import msgspec
import pytest

from tests.apps.tools import app as tools
from tether import App, Client, NatsConfig, StepContext, TaskStatus, Worker
from tether.nats.store import Store
from tether.schemas import StepCompleted, StepStarted


async def test_each_step_names_the_build_that_ran_it_across_a_deploy(
    client: Client, store: Store, dispatcher: object, config: NatsConfig
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
    built = [await store.checkpoints.get(task_id, step) for step in range(2)]
    assert [c.build if c else "missing" for c in built] == ["v1", None]  # step 1: an answer
    events = [e async for e in handle.events(timeout=5)]
    started = [(e.step, e.build) for e in events if isinstance(e, StepStarted)]
    completed = [(e.step, e.build) for e in events if isinstance(e, StepCompleted)]
    assert started == [(0, "v1"), (1, "v1"), (2, "v2")]
    assert completed == [(0, "v1"), (1, None), (2, "v2")]


def _lookups() -> tuple[App, App]:
    """The same tool in two builds, the second's input needing a field the first's lacks."""
    old, new = App("search"), App("search")

    @old.tool(name="lookup")
    async def lookup_v1(ctx: StepContext, q: Query) -> str:
        return q.query

    @new.tool(name="lookup")
    async def lookup_v2(ctx: StepContext, q: Wider) -> str:
        return q.query

    return old, new


async def test_a_worker_says_at_start_that_a_tool_no_longer_fits_the_build_before(
    config: NatsConfig, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = _lookups()
    async with Worker(old, config, build="v1"):  # still up as the next build starts
        with caplog.at_level(logging.WARNING, logger="tether.worker"):
            async with Worker(new, config, build="v2"):
                pass
    (said,) = [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()]
    assert "tool 'lookup' of build v2 does not fit build v1" in said
    assert "input field 'limit' is required now" in said


async def test_with_nothing_left_of_the_build_before_its_misfit_is_no_warning(
    config: NatsConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """`tether dev` started again on changed code: no worker of the build before is up and
    no step waits for it, so how a tool does not fit it (and "pinned tasks") is a DEBUG
    line, not a warning after every restart (issue 50, item 5)."""
    old, new = _lookups()
    async with Worker(old, config, build="v1"):
        pass
    with caplog.at_level(logging.DEBUG, logger="tether.worker"):
        async with Worker(new, config, build="v2"):
            pass
    said = [r for r in caplog.records if "does not fit" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.DEBUG]


class Query(msgspec.Struct):
    query: str


class Wider(msgspec.Struct):
    query: str
    limit: int
