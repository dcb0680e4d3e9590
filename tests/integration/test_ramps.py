"""Ramp, promote and roll back (`tether builds`): a ramp sends its share of new tasks
(by task id) to a build, a rollback sends new tasks back within seconds, and a build
whose tool does not fit the one before is listed with why."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from tests.conftest import APP, start_worker, stop_worker
from tether import App, Child, Client, NatsConfig, StepContext, TaskFailedError, Worker
from tether.clock import utcnow
from tether.deploys.rollout import MOVE_EVERY
from tether.deploys.routing import ramped
from tether.errors import TaskConflictError
from tether.nats.store import Store
from tether.schemas.builds import Versioning, WhenGone
from tether.tasks.sweep import Sweeper
from tether.testing import wait_until


async def _builds_of(client: Client, count: int) -> list[str | None]:
    handles = await asyncio.gather(*(client.submit(["fast"]) for _ in range(count)))
    await asyncio.gather(*(h.wait(timeout=60) for h in handles))
    return [(await h.get()).build for h in handles]


async def test_a_ramp_sends_its_share_of_new_tasks_and_a_rollback_takes_them_back(
    client: Client,
    config: NatsConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two `tether worker` processes of one app: v1, then v2."""
    workers = []
    try:
        for build in ("v1", "v2"):
            monkeypatch.setenv("TETHER_BUILD", build)
            workers.append(start_worker(config, APP, log=tmp_path / f"{build}.log"))

            async def up(build: str = build) -> bool:
                return build in {w.build for w in await client.workers()}

            await wait_until(up, timeout=20, message=f"the worker of {build} up")
        said = await client.ramp("v2", 10)
        assert said.said == "10% of new tasks go to v2; the rest to v1"
        builds = await _builds_of(client, 1000)
        assert 70 <= builds.count("v2") <= 130, builds.count("v2")  # 10 % ± 3 %
        assert builds.count("v1") == 1000 - builds.count("v2")

        rolled = await client.rollback("v2")
        assert "tasks pinned to v2 stay on it" in rolled.said
        back = time.monotonic()

        async def all_on_v1() -> bool:
            return set(await _builds_of(client, 50)) == {"v1"}

        await wait_until(all_on_v1, timeout=5, message="new tasks back on v1")
        assert time.monotonic() - back < 5
        listed = {row.build: row for row in (await client.builds()).builds}
        assert listed["v2"].state == "retired" and listed["v1"].state == "current"
        assert listed["v1"].share == 100

        promoted = await client.promote("v2")
        assert promoted.said == "new tasks and moving steps go to v2"
        assert set(await _builds_of(client, 50)) == {"v2"}
    finally:
        for worker in workers:
            stop_worker(worker)


async def _both_up(client: Client) -> bool:
    return {w.build for w in await client.workers()} >= {"v1", "v2"}


async def test_a_build_no_worker_announced_is_refused_with_what_to_do(client: Client) -> None:
    try:
        await client.promote("v9")
    except TaskConflictError as exc:
        assert "no worker has announced build 'v9'" in str(exc)
    else:
        raise AssertionError("promoting an unknown build was taken")


class Sum(msgspec.Struct):
    sum: int


class Total(msgspec.Struct):
    total: int


def _reports(version: str, tools: tuple[str, ...] = ("first", "report")) -> App:
    """`first` is the same in both builds; v2's `report` takes `{"total": n}`, where
    v1's took `{"sum": n}`."""
    app = App("reports", versioning="pinned", build_grace=0)

    async def first(ctx: StepContext) -> dict[str, int]:
        return {"sum": 1}

    async def report_v1(ctx: StepContext, s: Sum) -> str:
        return f"v1 {s.sum}"

    async def report_v2(ctx: StepContext, t: Total) -> str:
        return f"v2 {t.total}"

    if "first" in tools:
        app.tool(first)
    if "report" in tools:
        app.tool(name="report")(report_v1 if version == "v1" else report_v2)
    return app


async def test_no_pinned_step_moves_onto_a_build_whose_tool_would_refuse_it(
    client: Client, config: NatsConfig, caplog: pytest.LogCaptureFixture
) -> None:
    async with Worker(_reports("v1"), config, build="v1"):  # v1 announced, with both tools
        with caplog.at_level(logging.WARNING, logger="tether.worker"):
            async with Worker(_reports("v2"), config, build="v2"):
                pass
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "tool 'report' of build v2 does not fit build v1" in said
    rows = {row.build: row for row in (await client.builds()).builds}
    assert rows["v2"].before == "v1"
    assert rows["v2"].changes["report"] == ["input field 'total' is required now"]

    handle = await client.submit(["first", "report"])
    async with Worker(_reports("v1", ("first",)), config, build="v1"):
        await handle.wait_for(lambda r: r.current_step == 1, timeout=20)
    # v1 is gone; its task's report step waits on v1 rather than move onto v2
    async with Worker(_reports("v2"), config, build="v2"):

        async def routed_to_v1() -> bool:
            rows = {row.build: row for row in (await client.builds()).builds}
            return rows["v1"].routed == 1 and rows["v2"].workers == 1

        await wait_until(routed_to_v1, timeout=10, message="the report step routed to v1")
        await asyncio.sleep(2 * MOVE_EVERY + 0.5)  # the mover looked, and put it back
        record = await handle.get()
        assert record.current_step == 1 and not record.status.is_terminal
        async with Worker(_reports("v1"), config, build="v1"):
            assert await handle.wait(timeout=20) == "v1 1"
    started = [e for e in [e async for e in handle.events(timeout=5)] if e.kind == "step_started"]
    assert [(e.step, e.attempt, e.build) for e in started] == [(0, 1, "v1"), (1, 1, "v1")]


def _pinned(version: str, when_gone: WhenGone, tools: tuple[str, ...] = ("first", "second")) -> App:
    """Two tools whose schemas are the same in every build."""
    app = App("pins", versioning="pinned", when_gone=when_gone, build_grace=2)

    async def first(ctx: StepContext) -> dict[str, int]:
        return {"sum": 1}

    async def second(ctx: StepContext, s: Sum) -> str:
        return f"{version} {s.sum}"

    for tool in (first, second):
        if tool.__name__ in tools:
            app.tool(tool)
    return app


@pytest.mark.parametrize("when_gone", ["move", "fail"])
async def test_a_pinned_step_whose_build_is_gone_moves_or_fails_after_its_grace(
    when_gone: WhenGone, client: Client, config: NatsConfig
) -> None:
    """v2 serves both tools; v1's worker of `second` goes, and a v1 worker of `first`
    alone starts a pinned task. Its `second` waits on v1 for the grace (2 s), then runs
    on v2 (`move`, its first attempt) or its task fails saying which worker to start."""
    async with Worker(_pinned("v2", when_gone), config, build="v2"):
        async with Worker(_pinned("v1", when_gone), config, build="v1"):
            pass  # v1 served both tools, and is newer: new tasks start on it
        gone_at = utcnow()
        async with Worker(_pinned("v1", when_gone, ("first",)), config, build="v1"):
            handle = await client.submit(["first", "second"])
            if when_gone == "move":
                assert await handle.wait(timeout=20) == "v2 1"
            else:
                with pytest.raises(TaskFailedError) as failed:
                    await handle.wait(timeout=20)
                assert failed.value.error is not None and failed.value.error.type == "BuildGone"
                assert "start one (tether worker --build v1)" in failed.value.error.message
    events = [e async for e in handle.events(timeout=5)]
    started = [(e.step, e.attempt, e.build) for e in events if e.kind == "step_started"]
    assert started == ([(0, 1, "v1"), (1, 1, "v2")] if when_gone == "move" else [(0, 1, "v1")])
    ended = events[-1].time  # the step ran, or the task failed, once the grace was over
    assert ended - gone_at >= timedelta(seconds=1.5), (gone_at, ended)


def _tree(version: str, sub: Versioning) -> App:
    """A pinned `spawn` that starts a child task of `sub`, which says its build."""
    app = App("tree", versioning="pinned")

    async def spawn(ctx: StepContext) -> Child:
        return Child(["sub"])

    async def sub_agent(ctx: StepContext) -> str:
        return version

    app.tool(spawn)
    app.tool(name="sub", versioning=sub)(sub_agent)
    return app


@pytest.mark.parametrize("sub", ["pinned", "moving"])
async def test_a_child_task_counts_as_started_on_the_build_of_the_step_that_started_it(
    sub: Versioning, client: Client, config: NatsConfig
) -> None:
    """A task ramped onto v1 while v2 is current starts a child: a pinned child runs on
    v1, its parent's code; a moving one on v2, the current build."""
    ramped_ids = (f"tree-{uuid.uuid4().hex[:8]}" for _ in itertools.count())
    on_v1 = (task_id for task_id in ramped_ids if ramped(task_id, 50))
    async with Worker(_tree("v1", sub), config, build="v1"):
        pass  # v1 announced first: v2 is the newer, current build
    async with (
        Worker(_tree("v1", sub), config, build="v1"),
        Worker(_tree("v2", sub), config, build="v2"),
    ):
        await wait_until(lambda: _both_up(client), timeout=10, message="v1 and v2 up")
        await client.ramp("v1", 50)

        async def ramp_heard() -> bool:
            probe = await client.submit(["spawn"], task_id=next(on_v1))
            await probe.wait(timeout=20)
            return (await probe.get()).build == "v1"

        await wait_until(ramp_heard, timeout=10, message="the ramp heard by the workers")
        handle = await client.submit(["spawn"], task_id=next(on_v1))
        assert await handle.wait(timeout=20) == ("v1" if sub == "pinned" else "v2")
    parent = await handle.get()
    child = await client.get(parent.children[0])
    assert parent.build == "v1" and child.parent is not None and child.parent.build == "v1"
    assert child.build == ("v1" if sub == "pinned" else "v2")


async def test_gc_forgets_builds_no_worker_runs_and_no_unfinished_task_started_on(
    client: Client, store: Store, config: NatsConfig
) -> None:
    async with Worker(_reports("v1"), config, build="v1"):
        assert await (await client.submit(["first", "report"])).wait(timeout=20) == "v1 1"
    async with Worker(_reports("v2"), config, build="v2"):
        # started on v2, then waits for a tool no worker serves: unfinished
        waiting = await client.submit(["first", "unserved"])
        await waiting.wait_for(lambda r: r.current_step == 1, timeout=20)
    async with Worker(_reports("v3", ("first",)), config, build="v3"):
        later = utcnow() + timedelta(days=8)
        report = await Sweeper(store).sweep(now=later, dry_run=True)
        assert report.builds == ["v1"]  # v2 has a task still to run, v3 a worker up
        await Sweeper(store).sweep(now=later)
    assert [info.build for info in await store.workers.builds()] == ["v2", "v3"]
