"""kill -9 of a real worker process with many tasks in flight, and a restart of nats-server."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.apps.tools import read_executions
from tests.chaos.crashes import restartable
from tests.conftest import APP, start_worker, stop_worker
from tether import Client, NatsConfig
from tether.nats.store import Store
from tether.schemas import TaskStatus
from tether.testing import eventually, wait_until
from tether.testing.progress import stored_steps

pytestmark = pytest.mark.slow

PLAN = [
    {"tool": "fast", "input": {"n": 1}},
    {"tool": "slow", "input": {"sleep": 0.5}},
    {"tool": "fast"},
]
TASKS = 60


async def all_completed(client: Client, task_ids: list[str]) -> None:
    records = {r.task_id: r.status for r in await client.list()}
    done = sum(records.get(t) is TaskStatus.COMPLETED for t in task_ids)
    assert done == len(task_ids), f"{done}/{len(task_ids)} completed"


async def test_kill_9_of_a_worker_loses_nothing_and_reruns_no_checkpointed_step(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    worker = start_worker(config, APP, log=tmp_path / "worker-1.log", concurrency=20)
    handles = [await client.submit(PLAN, task_id=f"kill-{i}") for i in range(TASKS)]
    task_ids = [h.task_id for h in handles]
    # Kill while the slow middle steps of many tasks are in flight.
    await wait_until(
        lambda: sum(step == 1 for _, step in read_executions(executions)) >= 20,
        timeout=30,
        message="20 slow steps started",
    )
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    done_at_kill = await stored_steps(store)
    started_at_kill = set(read_executions(executions))

    replacement = start_worker(config, APP, log=tmp_path / "worker-2.log", concurrency=20)
    try:
        await eventually(lambda: all_completed(client, task_ids), timeout=60, interval=0.2)
    finally:
        stop_worker(replacement)

    counts = read_executions(executions)
    rerun = {key for key, n in counts.items() if n > 1}
    in_flight_at_kill = started_at_kill - done_at_kill
    print(
        f"\n{TASKS} tasks, 1 kill: {len(done_at_kill)} steps checkpointed at the kill, "
        f"{len(in_flight_at_kill)} in flight, {len(rerun)} ran twice"
    )
    assert len(counts) == TASKS * 3
    assert not rerun & done_at_kill, "a checkpointed step ran again"
    assert rerun <= in_flight_at_kill
    assert max(counts.values()) <= 2
    for handle in handles:
        assert (await handle.get()).result["step"] == 2


async def test_restart_of_nats_server_loses_nothing(
    tmp_path: Path, executions: Path, prefix: str
) -> None:
    worker = None
    async with restartable(tmp_path, prefix) as (server, config, client):
        try:
            worker = start_worker(config, APP, log=tmp_path / "worker.log", concurrency=20)
            await wait_until(lambda: _registered(client), timeout=20, message="worker registered")
            handles = [await client.submit(PLAN, task_id=f"restart-{i}") for i in range(40)]
            await wait_until(
                lambda: sum(step == 1 for _, step in read_executions(executions)) >= 10,
                timeout=30,
                message="10 slow steps started",
            )

            server.kill()
            server.start()

            results = await asyncio.gather(*(h.wait(timeout=60) for h in handles))
            assert all(r["step"] == 2 for r in results)
            counts = read_executions(executions)
            assert len(counts) == 40 * 3
            assert max(counts.values()) <= 2
        finally:
            if worker is not None:
                stop_worker(worker)


async def _registered(client: Client) -> bool:
    return await client._store.tools.get("slow") is not None
