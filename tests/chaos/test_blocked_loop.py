"""A worker whose event loop is blocked (a tool calling blocking code, a machine starved
of CPU) answers "are you alive?" from a thread of its own (issue 51, item 2): however
late its beats, it is not taken for dead and its held step runs once, until its loop has
not turned for `--loop-stall`; then it is, as before."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.tools import read_executions
from tests.chaos.test_dead_known_at_once import judging
from tests.chaos.test_held_steps import held_entries
from tests.conftest import start_worker, stop_worker
from tether import Client, NatsConfig, Worker
from tether.nats.store import Store
from tether.schemas import StepCompleted
from tether.testing import eventually
from tether.worker import Liveness

BLOCK_S = 4.0
"""Five times the judge's `dead_after`."""
JUDGE = Liveness(beat_every=0.1, dead_after=0.8)


@pytest.fixture
def blocking(
    config: NatsConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[subprocess.Popen[bytes]]:
    """A `tether worker` of the blocking tool, its `--loop-stall` the test's parameter."""
    monkeypatch.setenv("TETHER_LOOP_STALL", str(request.param))
    process = start_worker(config, "tests.apps.blocking:app", log=tmp_path / "blocking.log")
    yield process
    stop_worker(process)


async def _blocked_worker(store: Store, task_id: str) -> str:
    """The key of the worker that holds the task's step (once it does)."""

    async def held() -> str:
        entries = await held_entries(store)
        assert any(task_id in entry for entry in entries), entries
        return next(entry for entry in entries if task_id in entry)

    return (await eventually(held, timeout=20)).split(".")[0]


async def _claims_while(store: Store, key: str, running: asyncio.Task[object]) -> int:
    """How many looks, every 0.1 s while `running` runs, found the worker claimed (or its
    beat removed, once its held steps were handed on)."""
    claims = 0
    while not running.done():
        beat = await store.workers.beat_of(key)
        claims += beat is None or beat.claimed_by is not None
        await asyncio.sleep(0.1)
    return claims


@pytest.mark.parametrize("blocking", [20.0, 1.0], indirect=True, ids=["within", "past"])
async def test_a_blocked_worker_is_answered_for_until_its_loop_stall(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    blocking: subprocess.Popen[bytes],
    request: pytest.FixtureRequest,
) -> None:
    within = request.node.callspec.id == "within"
    async with Worker(judging, config, worker_id="judge", liveness=JUDGE):
        handle = await client.submit([{"tool": "block", "input": {"block": BLOCK_S}}])
        key = await _blocked_worker(store, handle.task_id)
        waiting = asyncio.create_task(handle.wait(timeout=30))
        claims = await _claims_while(store, key, waiting)
        result = await waiting
    assert result == {"blocked": BLOCK_S}
    if within:
        assert claims == 0, "taken for dead while its loop was blocked"
        assert read_executions(executions)[(handle.task_id, 0)] == 1
        completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
        assert [e.attempt for e in completed] == [1]
    else:  # blocked past --loop-stall: taken for dead (its step may run again, as documented)
        assert claims > 0
