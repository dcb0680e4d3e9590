"""A live worker taken for dead (its beats came too late) hears that it was claimed and
stops the steps it held: each then runs in one place, and the attempt that runs on is
the one whose output is stored and named by `step_completed`."""

from __future__ import annotations

import logging

import pytest

from tests.apps.tools import app as tools
from tether import Client, NatsConfig, Worker
from tether.nats.workers import worker_key
from tether.schemas import StepCompleted
from tether.testing import wait_until
from tether.worker.succession import Succession


async def test_a_worker_that_hears_it_was_claimed_stops_the_steps_it_held(
    config: NatsConfig, client: Client, dispatcher: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether.worker")
    async with Worker(tools, config) as worker:
        key = worker_key(worker.worker_id)
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 2.0}}])
        store = client._store
        await wait_until(lambda: _holds(client, key), timeout=10, message="the step to be held")

        # Another worker takes it for dead, as one whose beats stopped reaching it would.
        assert await Succession(store, worker_key("survivor")).take_over(key) == 1

        await handle.wait(timeout=15)
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    assert [e.attempt for e in completed] == [2]  # the first attempt stopped; it never won
    taken = [r.getMessage() for r in caplog.records if "taken for dead" in r.getMessage()]
    assert len(taken) == 1 and "the 1 step(s) it held" in taken[0]


async def _holds(client: Client, key: str) -> bool:
    return bool(await client._store.workers.keys(key + ".>"))
