"""Liveness from NATS itself (issue 51): a worker whose beat is late is asked on a subject
only it serves. "No responders" (its connection is gone) has its held steps run
elsewhere at once, long before `--dead-after`; an answer keeps it alive however late its
beats, so its steps run once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.tools import app as tools
from tests.apps.tools import read_executions
from tests.chaos.test_held_steps import held_entries
from tests.conftest import APP, start_worker, stop_worker
from tether import App, Client, NatsConfig, StepContext, Worker
from tether.nats.failures import unavailable
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas import StepCompleted
from tether.testing import eventually, wait_until
from tether.worker import Liveness

DEAD_AFTER = 30.0
"""So long that a step run again before it can only have been handed on by a question."""
HELD_STEP_S = 25
"""The held step's length: still running at the kill, after the survivor's start (over
12 s on a loaded 2-core machine)."""
STEADY_S = 2.5
"""Past the 2 s a survivor's connection must be steady before it believes "no responders"."""
judging = App("judging")


@judging.tool()
async def idle(ctx: StepContext) -> None:
    """The judge serves a tool of its own: the held step can come back only to its holder."""


@pytest.fixture
def first(
    config: NatsConfig,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[subprocess.Popen[bytes]]:
    """A `tether worker` process, SIGKILLed by the test (killed at its end in any case);
    every worker started here waits `DEAD_AFTER` for a silent one."""
    monkeypatch.setenv("TETHER_DEAD_AFTER", str(DEAD_AFTER))
    process = start_worker(config, APP, log=tmp_path / "first.log")
    yield process
    process.kill()
    process.wait(10)


@pytest.mark.slow
async def test_a_sigkilled_workers_held_step_runs_on_a_live_worker_long_before_dead_after(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    tmp_path: Path,
    first: subprocess.Popen[bytes],
) -> None:
    handle = await client.submit(
        [{"tool": "fast"}, {"tool": "slow", "input": {"sleep": HELD_STEP_S}}, {"tool": "fast"}]
    )
    step = (handle.task_id, 1)

    async def step_1_held() -> None:
        entries = await held_entries(store)
        assert len(entries) == 1 and entries[0].endswith(f".{handle.task_id}.1"), entries
        assert f"-{first.pid}-" in entries[0], entries  # held by the first worker

    survivor = None
    try:
        await eventually(step_1_held, timeout=20)
        survivor = start_worker(config, APP, log=tmp_path / "survivor.log")
        await wait_until(lambda: _listed(store, 2), timeout=20, message="both workers beating")
        await step_1_held()  # still running there: killed mid-step
        first.send_signal(signal.SIGKILL)
        first.wait(10)

        async def ran_again() -> None:
            assert read_executions(executions)[step] == 2, read_executions(executions)

        await eventually(ran_again, timeout=DEAD_AFTER / 2)
        result = await handle.wait(timeout=HELD_STEP_S + 30)
    finally:
        if survivor is not None:
            stop_worker(survivor)
    assert result == {"step": 2, "payload": {"step": 1, "slept": HELD_STEP_S}}
    counts = read_executions(executions)
    assert [counts[(handle.task_id, n)] for n in range(3)] == [1, 2, 1]  # step 0 kept
    runs = [line.split() for line in executions.read_text().splitlines()]
    assert [int(pid) for _, where, _, pid, *_ in runs if where == "1"] == [
        first.pid,
        survivor.pid,
    ]


async def test_a_worker_whose_beats_come_far_apart_answers_and_is_never_taken_for_dead(
    config: NatsConfig, client: Client, store: Store, dispatcher: object, executions: Path
) -> None:
    """The judge takes a worker silent for 0.8 s for dead; the holder beats every 30 s (a
    setting of its own, as a worker on an overloaded machine whose beats come late)."""
    judge = Liveness(beat_every=0.1, dead_after=0.8)
    async with Worker(judging, config, worker_id="judge", liveness=judge):
        # Started after the judge, which hears its first beat (saying that it answers).
        rare = Liveness(beat_every=30.0, dead_after=60.0)
        async with Worker(tools, config, worker_id="rare", liveness=rare):
            handle = await client.submit([{"tool": "slow", "input": {"sleep": 3.0}}])

            async def held() -> None:
                assert await held_entries(store) == [f"rare.{handle.task_id}.0"]

            await eventually(held, timeout=10)
            result = await handle.wait(timeout=20)
            beat = await store.workers.beat_of(worker_key("rare"))
    assert result == {"step": 0, "slept": 3.0}
    assert read_executions(executions)[(handle.task_id, 0)] == 1
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    assert [e.attempt for e in completed] == [1]
    assert beat is not None and beat.claimed_by is None


async def _listed(store: Store, n: int) -> bool:
    return len(await store.workers.list()) == n


@pytest.mark.slow
async def test_no_responders_is_not_believed_while_the_askers_own_connection_is_disturbed(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    first: subprocess.Popen[bytes],
) -> None:
    """A NATS call of the survivor's that goes unanswered (as around a failover, when a
    server may not know yet of the others' subscribers) leaves the verdict to the beats;
    once its connection is steady again, "no responders" is believed."""
    doomed = first
    disturbing: asyncio.Task[None] | None = None
    try:
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 10}}])

        async def held() -> None:
            entries = await held_entries(store)
            assert len(entries) == 1 and f"-{doomed.pid}-" in entries[0], entries

        await eventually(held, timeout=20)
        survivor = Worker(tools, config, worker_id="survivor", liveness=Liveness(dead_after=30))
        async with survivor:
            await asyncio.sleep(STEADY_S)  # steady: it would believe "no responders"
            disturbing = asyncio.create_task(_disturb())
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
            await asyncio.sleep(3.0)
            await held()  # still the dead worker's: the survivor did not believe it
            assert read_executions(executions)[(handle.task_id, 0)] == 1
            disturbing.cancel()
            await asyncio.sleep(1.0)  # asked, twice "no responders", not yet steady for 2 s
            await held()

            async def ran_again() -> None:
                assert read_executions(executions)[(handle.task_id, 0)] == 2

            await eventually(ran_again, timeout=DEAD_AFTER / 3)
            assert await handle.wait(timeout=20) == {"step": 0, "slept": 10}
    finally:
        if disturbing is not None:
            disturbing.cancel()


async def _disturb() -> None:
    """NATS calls of this process going unanswered, one every 50 ms."""
    while True:
        unavailable(TimeoutError("a test's unanswered call"))
        await asyncio.sleep(0.05)
