"""Run by `test_layout_migration` with Tether at b3b5931 (layout 2) on the path: fills the
installation at argv[1] with what a migration must not lose, then prints the task ids.

A task asleep for a few seconds, one asleep for an hour past its deadline, one waiting
for input that expires, and one whose first step (with an input stored as a blob, in
the Object Store's own format) is queued with no worker to take it."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta

from tests.apps.tools import app
from tether import Client, Dispatcher, NatsConfig, Worker

SOON = 6
"""Seconds until the timers that fire during the test fire."""
LARGE = "x" * (300 * 1024)


async def main(url: str) -> None:
    config = NatsConfig(url=url)
    async with Client(config) as client, Dispatcher(config):
        async with Worker(app, config):
            sleeper = await client.submit([{"tool": "naps", "input": {"seconds": SOON}}, "clock"])
            late = await client.submit(
                [{"tool": "naps", "input": {"seconds": 3600}}, "clock"],
                deadline=timedelta(seconds=SOON),
            )
            asker = await client.submit([{"tool": "asks_briefly", "input": {"timeout": SOON}}])
            for handle in (sleeper, late):
                await handle.wait_for(lambda r: r.wake_at is not None, 10)
            await asker.wait_for(lambda r: r.input_request is not None, 10)
        queued = await client.submit([{"tool": "fast", "input": LARGE}])
        ids = {"sleeper": sleeper.task_id, "late": late.task_id}
        ids |= {"asker": asker.task_id, "queued": queued.task_id}
    print(json.dumps(ids))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
