"""A death is evidence against a step only when it ran alone in its process (issue 48,
items 1-2): one ordinary crash costs the steps it held no attempt and runs them again at
once, side by side; a crash-looping poison beside innocent steps fails alone, saying so."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from tests.apps.tools import read_executions
from tests.chaos.test_held_steps import held_entries
from tests.conftest import start_worker, stop_worker
from tether import Client, NatsConfig, TaskStatus
from tether.nats.store import Store
from tether.testing import eventually

pytestmark = pytest.mark.slow
APP = "tests.apps.crash_loop:app"
INNOCENTS = 30
HELD = 50
NAP = 4.0  # seconds: a step that lasts as an agent's does, not milliseconds
ONCE = {"max_attempts": 1}  # a step that may not spend a single attempt on a crash


async def test_a_crash_looping_worker_fails_only_its_poison_and_charges_no_innocent(
    config: NatsConfig, client: Client, dispatcher: object, executions: Path, tmp_path: Path
) -> None:
    poison = await client.submit([{"tool": "chore", "input": {"poison": True}}], task_id="poison")
    innocents = [
        await client.submit(
            [{"tool": "chore", "input": {"sleep": 1.0}, "retry": ONCE}], task_id=f"innocent-{i}"
        )
        for i in range(INNOCENTS)
    ]
    deaths = 0
    worker = start_worker(config, APP, log=tmp_path / "worker.log")
    try:
        # A supervisor's restart loop (Kubernetes' CrashLoopBackOff, without the backoff).
        deadline = asyncio.get_running_loop().time() + 180
        while asyncio.get_running_loop().time() < deadline:
            records = [await h.get() for h in [poison, *innocents]]
            if all(r.status.is_terminal for r in records):
                break
            if worker.poll() is not None:
                assert worker.returncode == -signal.SIGKILL, worker.returncode
                deaths += 1
                worker = start_worker(config, APP, log=tmp_path / "worker.log")
            await asyncio.sleep(0.2)
    finally:
        if worker.poll() is None:
            stop_worker(worker)
    failed = [(r.task_id, r.error) for r in records[1:] if r.status is not TaskStatus.COMPLETED]
    assert not failed, f"innocent tasks failed (an attempt charged for another's crash): {failed}"
    verdict = records[0]
    assert verdict.status is TaskStatus.FAILED, verdict
    assert verdict.error is not None and verdict.error.type == "SuspectedPoison", verdict.error
    assert "its worker died 2 times while it ran alone" in verdict.error.message
    letters = await client.dead_letters()
    assert [d.task_id for d in letters] == ["poison"]
    # Two deaths make it a suspect that runs alone; two deaths alone condemn it (the
    # first run of a step that dies at once may go unseen).
    assert 4 <= deaths <= 6, deaths
    ran = read_executions(executions)
    assert all(ran[(f"innocent-{i}", 0)] >= 1 for i in range(INNOCENTS))


async def test_a_crashed_workers_held_steps_run_again_at_once_side_by_side(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    executions: Path,
    tmp_path: Path,
) -> None:
    plan = [{"tool": "nap", "input": {"sleep": NAP}, "retry": ONCE}]
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log", concurrency=HELD)
    handles = [await client.submit(plan, task_id=f"held-{i}") for i in range(HELD)]

    async def all_held() -> None:
        assert len(await held_entries(store)) == HELD

    try:
        await eventually(all_held, timeout=30)
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    started = time.monotonic()
    survivor = start_worker(config, APP, log=tmp_path / "survivor.log", concurrency=HELD)
    try:
        results = await asyncio.gather(*(h.wait(timeout=90) for h in handles))
        recovered = time.monotonic() - started
    finally:
        stop_worker(survivor)
    assert results == [2] * HELD  # the second run of each, none charged (max_attempts=1)
    again = [line.split() for line in executions.read_text().splitlines()]
    starts = sorted(float(line[4]) for line in again if line[2] == "2")
    assert len(starts) == HELD, again
    # Side by side: every second run started before the first of them could have ended.
    assert starts[-1] - starts[0] < NAP, f"the runs started over {starts[-1] - starts[0]:.1f}s"
    print(f"{HELD} held {NAP:.0f}-second steps completed {recovered:.1f}s after the restart")
