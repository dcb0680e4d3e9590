"""Drains and deaths of real `tether worker` processes serving steps routed to their
build (`tests/apps/deploys.py`, pinned): a draining worker that is not its build's last
takes no new step, and a pinned step whose build's last worker died moves, or fails,
as its grace ends."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import start_worker, stop_worker
from tether import Client, NatsConfig, TaskFailedError, TaskHandle
from tether.clock import utcnow
from tether.nats.store import Store
from tether.schemas import StepStarted
from tether.schemas.builds import WhenGone
from tether.testing import wait_until
from tether.worker.liveness import Liveness

APP = "tests.apps.deploys:app"
SIGTERM_SENT = "-- sigterm sent"
"""A line the test writes into the executions file as it sends SIGTERM."""


def _start(
    config: NatsConfig, version: str, log: Path, patch: pytest.MonkeyPatch, concurrency: int = 32
) -> subprocess.Popen[bytes]:
    patch.setenv("TETHER_TEST_DEPLOY_VERSION", version)
    return start_worker(config, APP, log=log, concurrency=concurrency, drain=True)


async def _up(client: Client, build: str, count: int) -> None:
    async def enough() -> bool:
        return sum(w.build == build for w in await client.workers()) >= count

    await wait_until(enough, timeout=30, message=f"{count} worker(s) of build {build} up")


def _started(executions: Path) -> list[list[str]]:
    """Each execution (task, step, attempt, pid, build), and the SIGTERM line, in order."""
    return [line.split() for line in executions.read_text().splitlines()]


async def test_a_draining_worker_that_is_not_its_builds_last_starts_no_new_step(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v1a and v1b run pinned tasks whose quick first steps leave their slow second steps
    queued on v1's subject. SIGTERM v1a, with a drain of 3 s: it starts no step it had
    not taken at the signal (it took some 20 more, and its drain ran out on some, which
    ran again on v1b), and leaves as its running steps end, v1b serving the rest."""
    concurrency, tasks = 2, 80
    monkeypatch.setenv("TETHER_TEST_VERSIONING", "pinned")
    monkeypatch.setenv("TETHER_TEST_PAUSE", "0.2")
    monkeypatch.setenv("TETHER_DRAIN_TIMEOUT", "3")
    monkeypatch.setenv("TETHER_STEP_SLACK", "5")  # a starved worker's steps: not a drain's
    logs = [tmp_path / "v1a.log", tmp_path / "v1b.log"]
    v1a, v1b = (_start(config, "v1", log, monkeypatch, concurrency) for log in logs)
    try:
        await _up(client, "v1", 2)
        await client.promote("v1")  # told apart: each second step is routed to v1
        lookup = {"tool": "lookup", "input": {"query": "builds"}}
        handles = [
            await client.submit([lookup, {"tool": "count", "input": i}]) for i in range(tasks)
        ]
        await wait_until(
            lambda: (
                [row[1:4] for row in _started(executions)].count(["1", "1", str(v1a.pid)])
                >= concurrency
            ),
            timeout=30,
            message="v1a to run routed steps",
        )
        v1a.send_signal(signal.SIGTERM)
        with executions.open("a") as out:
            out.write(SIGTERM_SENT + "\n")
        await asyncio.to_thread(v1a.wait, 30)
        await asyncio.gather(*(h.wait(timeout=60) for h in handles))
    finally:
        for worker in (v1a, v1b):
            stop_worker(worker)

    said = logs[0].read_text()
    assert v1a.returncode == 0 and "draining worker" in said, said
    rows = _started(executions)
    after = rows[rows.index(SIGTERM_SENT.split()) + 1 :]
    late = Counter(row[1] for row in after if row[3] == str(v1a.pid))
    # At the signal v1a held at most one step of a tool per slot: those may start after
    # it, no other
    assert max(late.values(), default=0) <= concurrency, f"v1a started after SIGTERM: {late}"
    assert "ran out of its" not in said, said  # it had nothing left to wait for
    runs = Counter((row[0], row[1]) for row in rows if row != SIGTERM_SENT.split())
    assert len(runs) == 2 * tasks
    twice = sorted(key for key, count in runs.items() if count > 1)
    assert not twice, f"steps that ran twice: {twice}"
    records = [await h.get() for h in handles]
    assert {r.build for r in records} == {"v1"}


@pytest.mark.parametrize("when_gone", ["move", "fail"])
async def test_a_pinned_step_of_a_killed_build_moves_or_fails_as_its_grace_ends(
    when_gone: WhenGone,
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v1, the last worker of its build, is SIGKILLed holding pinned steps; v2 hands them
    on, and moves them to itself (or fails their tasks) when their 2 s grace ends, which
    is when v1 has been silent `dead_after`, plus the grace. The survivor looked for them
    before they were handed back onto v1's subject, and looked next 10 s later."""
    grace = 2.0
    monkeypatch.setenv("TETHER_TEST_VERSIONING", "pinned")
    monkeypatch.setenv("TETHER_TEST_WHEN_GONE", when_gone)
    monkeypatch.setenv("TETHER_TEST_BUILD_GRACE", str(grace))
    hold = tmp_path / "hold"  # v1's `count` runs while it exists
    hold.touch()
    monkeypatch.setenv("TETHER_TEST_HOLD", str(hold))
    v1 = _start(config, "v1", tmp_path / "v1.log", monkeypatch)
    v2: subprocess.Popen[bytes] | None = None
    try:
        await _up(client, "v1", 1)
        handles = [await client.submit([{"tool": "count", "input": i}]) for i in range(3)]
        await wait_until(_holding(store, len(handles)), timeout=30, message="v1 to hold")
        v2 = _start(config, "v2", tmp_path / "v2.log", monkeypatch)
        await _up(client, "v2", 1)
        v1.kill()
        killed = utcnow()
        await asyncio.to_thread(v1.wait, 10)
        hold.unlink()
        ended = [await _ended(handle, when_gone) for handle in handles]
    finally:
        if v1.poll() is None:
            v1.kill()
        if v2 is not None:
            stop_worker(v2)

    # Its grace ends `dead_after` (v1's silence, as v2 judges it) plus the grace after the
    # kill. v2's view of that end is up to a beat early or a look (0.25 s) late, and the
    # move or failure comes within a second of it; 2.5 s of slack tells that from the
    # look 10 s after the build went (about 8 s late) without timing a loaded machine.
    ends = killed + timedelta(seconds=Liveness().dead_after + grace)
    for when in ended:
        assert when - killed >= timedelta(seconds=grace), (killed, when)
        assert when - ends <= timedelta(seconds=2.5), f"{(when - ends).total_seconds():.1f} s late"


def _holding(store: Store, count: int) -> Callable[[], Awaitable[bool]]:
    async def holding() -> bool:
        """Whether workers hold `count` steps (each under `<worker>.<msg id>`)."""
        return len(await store.workers.keys("*.>")) >= count

    return holding


async def _ended(handle: TaskHandle, when_gone: WhenGone) -> datetime:
    """When the step moved (v2 started it), or the task failed saying its build is gone."""
    if when_gone == "move":
        await handle.wait(timeout=30)
        events = [e async for e in handle.events(timeout=5)]
        moved = [e for e in events if isinstance(e, StepStarted) and e.build == "v2"]
        assert moved, events
        return moved[0].time
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error is not None and failed.value.error.type == "BuildGone"
    events = [e async for e in handle.events(timeout=5)]
    return events[-1].time
