"""Sleeping tasks survive a kill -9 of nats-server and of every worker: they wake on time
and nothing runs twice."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.apps.tools import read_executions
from tests.conftest import APP, start_worker, stop_worker
from tether import Client, Dispatcher, NatsConfig, NatsServer
from tether.schemas import Names
from tether.testing import wait_until

pytestmark = pytest.mark.slow

SLEEPERS = 10
NAP = 4.0


async def test_sleepers_wake_on_time_after_the_server_and_the_workers_restart(
    tmp_path: Path, executions: Path, prefix: str
) -> None:
    server = NatsServer(tmp_path / "nats").start()
    config = NatsConfig(url=server.url, names=Names(prefix=prefix))
    worker = replacement = None
    try:
        async with Client(config) as client, Dispatcher(config):
            worker = start_worker(config, APP, log=tmp_path / "worker.log")
            await wait_until(lambda: _registered(client), timeout=20, message="worker registered")
            plan = [{"tool": "naps", "input": {"seconds": NAP}}, "clock"]
            handles = [await client.submit(plan, task_id=f"nap-{i}") for i in range(SLEEPERS)]
            await wait_until(
                lambda: _all_asleep(client, [h.task_id for h in handles]),
                timeout=20,
                message="every task asleep",
            )

            worker.send_signal(signal.SIGKILL)  # nothing but JetStream holds the sleepers
            worker.wait(10)
            server.kill()
            server.start()
            replacement = start_worker(config, APP, log=tmp_path / "worker-2.log")

            results = await asyncio.gather(*(h.wait(timeout=60) for h in handles))
    finally:
        try:
            for process in (worker, replacement):
                if process is not None and process.poll() is None:
                    stop_worker(process)
        finally:
            server.stop()

    for result in results:
        waited = result["at"] - result["given"]["at"]
        assert NAP <= waited < NAP + 10, waited
    counts = read_executions(executions)
    assert len(counts) == SLEEPERS * 2
    assert max(counts.values()) == 1, counts  # the nap ran once, the wake-up once


async def _registered(client: Client) -> bool:
    return await client._store.tools.get("naps") is not None


async def _all_asleep(client: Client, task_ids: list[str]) -> bool:
    records = [await client.get(task_id) for task_id in task_ids]
    return all(r.wake_at is not None and r.current_step == 1 for r in records)
