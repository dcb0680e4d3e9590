"""A worker's graceful stop: in-flight steps get the grace, then are released to others."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from tests.apps.tools import app, read_executions
from tether import Client, NatsConfig, Worker
from tether.testing import wait_until


async def test_stop_keeps_to_the_grace_when_every_slot_runs_a_long_step(
    config: NatsConfig, client: Client, dispatcher: object, executions: Path
) -> None:
    worker = Worker(app, config, concurrency=1, shutdown_grace=timedelta(seconds=0.2))
    await worker.start()
    try:
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 60}}])
        await wait_until(
            lambda: read_executions(executions)[(handle.task_id, 0)] == 1,
            timeout=10,
            message="the long step started",
        )
    finally:
        # The only slot is busy for 60 s; the stop must not wait for it.
        await asyncio.wait_for(worker.stop(), timeout=15)

    async with Worker(app, config):
        await wait_until(
            lambda: read_executions(executions)[(handle.task_id, 0)] == 2,
            timeout=15,
            message="another worker took the released step",
        )
        await handle.cancel()
