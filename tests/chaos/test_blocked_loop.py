"""A worker whose event loop is blocked (a tool calling blocking code, a machine starved
of CPU) answers "are you alive?" from a thread of its own (issue 51, item 2): however
late its beats, it is not taken for dead and its held step runs once, until its loop has
not turned for `--loop-stall`; then it is, as before."""

from __future__ import annotations

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


@pytest.mark.parametrize("blocking", [20.0], indirect=True)
async def test_a_worker_whose_loop_is_blocked_for_seconds_is_not_taken_for_dead(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    blocking: subprocess.Popen[bytes],
) -> None:
    async with Worker(judging, config, worker_id="judge", liveness=JUDGE):
        handle = await client.submit([{"tool": "block", "input": {"block": BLOCK_S}}])
        key = await _blocked_worker(store, handle.task_id)
        result = await handle.wait(timeout=30)
        after = await store.workers.beat_of(key)
    assert result == {"blocked": BLOCK_S}
    assert read_executions(executions)[(handle.task_id, 0)] == 1
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    assert [e.attempt for e in completed] == [1]
    assert after is not None and after.claimed_by is None, "taken for dead while blocked"


@pytest.mark.parametrize("blocking", [1.0], indirect=True)
async def test_a_worker_whose_loop_is_blocked_past_its_loop_stall_is_taken_for_dead(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    blocking: subprocess.Popen[bytes],
) -> None:
    async with Worker(judging, config, worker_id="judge", liveness=JUDGE):
        handle = await client.submit([{"tool": "block", "input": {"block": BLOCK_S}}])
        key = await _blocked_worker(store, handle.task_id)

        async def claimed() -> None:  # its beat claimed, or removed once handed on
            now = await store.workers.beat_of(key)
            assert now is None or now.claimed_by is not None, now

        await eventually(claimed, timeout=BLOCK_S + 5)
        result = await handle.wait(timeout=30)
    assert result == {"blocked": BLOCK_S}  # handed on (it may run again, as documented)
