"""A crash-looping worker (a poison input kills it on every start) costs no attempt to the
steps it fetched and never ran, and the poison is given up as such (issue 37, item 6)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.apps.tools import read_executions
from tests.conftest import start_worker, stop_worker
from tether import Client, NatsConfig, TaskStatus

pytestmark = pytest.mark.slow
APP = "tests.apps.crash_loop:app"
INNOCENTS = 30


async def test_a_crash_looping_worker_fails_only_its_poison_saying_so(
    config: NatsConfig, client: Client, dispatcher: object, executions: Path, tmp_path: Path
) -> None:
    poison = await client.submit([{"tool": "chore", "input": {"poison": True}}], task_id="poison")
    innocents = [
        await client.submit([{"tool": "chore", "input": {"sleep": 0.3}}], task_id=f"innocent-{i}")
        for i in range(INNOCENTS)
    ]
    deaths = 0
    worker = start_worker(config, APP, log=tmp_path / "worker.log")
    try:
        # A supervisor's restart loop (Kubernetes' CrashLoopBackOff, without the backoff).
        deadline = asyncio.get_running_loop().time() + 120
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
    failed = [r.task_id for r in records[1:] if r.status is not TaskStatus.COMPLETED]
    assert not failed, (
        f"innocent tasks failed: {[(r.task_id, r.error) for r in records[1:] if r.error]}"
    )
    verdict = records[0]
    assert verdict.status is TaskStatus.FAILED, verdict
    assert verdict.error is not None and verdict.error.type == "SuspectedPoison", verdict.error
    assert "its worker died 3 times while it ran" in verdict.error.message
    letters = await client.dead_letters()
    assert [d.task_id for d in letters] == ["poison"]
    assert 3 <= deaths <= 5, deaths  # the first run of a step that dies at once is not seen
    ran = read_executions(executions)
    assert all(ran[(f"innocent-{i}", 0)] >= 1 for i in range(INNOCENTS))
