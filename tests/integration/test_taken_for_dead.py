"""A live worker taken for dead (its beats came too late) stops a step it held only once
that step is handed on, and a survivor follows its claim through: a step is never left
in neither place (issue 37: a task lost in a cluster's leader election)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest

from tests.apps.tools import app as tools
from tether import Client, NatsConfig, Worker
from tether.errors import NatsUnavailableError
from tether.nats.alive import Asked
from tether.nats.connection import connect
from tether.nats.failures import disturbances, unavailable
from tether.nats.layout import Layout
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas import StepCompleted
from tether.testing import wait_until
from tether.worker.succession import Succession


async def test_a_worker_that_hears_it_was_claimed_stops_the_steps_it_held(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tether.worker")
    async with Worker(tools, config) as worker:
        key = worker_key(worker.worker_id)
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 2.0}}])
        await wait_until(lambda: _holds(store, key), timeout=10, message="the step to be held")

        # Another worker takes it for dead, as one whose beats stopped reaching it would.
        assert await Succession(store, worker_key("survivor")).take_over(key) == 1

        await handle.wait(timeout=15)
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    assert [e.attempt for e in completed] == [2]  # the first attempt stopped; it never won
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "taken for dead" in said and "stopped 1 step(s) handed on elsewhere" in said


@pytest.fixture
async def survivor_store(config: NatsConfig) -> AsyncIterator[Store]:
    nc = await connect(config)
    try:
        yield await Store.open(nc, Layout.for_config(config))
    finally:
        await nc.close()


async def test_a_claim_whose_hand_on_fails_is_followed_through_and_the_step_runs_on_until_then(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    survivor_store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in a leader election: the survivor claims a worker whose beats were late, its
    hand-on times out, and the claimed worker beats again. The claimed worker's step runs
    on until the survivor has published it again, and the survivor tries until it has."""
    cut_off = asyncio.Event()
    publish = survivor_store.publish_raw

    async def publish_unless_cut_off(*args: object, **kwargs: object) -> None:
        if cut_off.is_set():
            raise NatsUnavailableError("NATS did not answer (TimeoutError)")
        await publish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(survivor_store, "publish_raw", publish_unless_cut_off)
    survivor = Succession(survivor_store, worker_key("survivor"), beat_stored=time.monotonic)
    monkeypatch.setattr(survivor, "_ask", _unanswered)  # the beats alone decide
    async with Worker(tools, config) as worker:
        key = worker_key(worker.worker_id)
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 4.0}}])
        await wait_until(lambda: _holds(store, key), timeout=10, message="the step to be held")
        announce = worker._announce

        async def late(store: Store) -> None:
            if not cut_off.is_set():
                await announce(store)

        cut_off.set()
        monkeypatch.setattr(worker, "_announce", late)  # its beats stop reaching anyone
        await survivor.start()
        try:
            await wait_until(lambda: _claimed(store, key), timeout=10, message="the claim")
            monkeypatch.setattr(worker, "_announce", announce)  # it beats again at once
            await asyncio.sleep(1.0)  # the claim's hand-on failing meanwhile, round on round
            assert await _holds(store, key), "the held step was lost (neither held nor sent)"
            assert worker._in_flight, "the claimed worker stopped a step not handed on"

            cut_off.clear()  # NATS answers the survivor again: its next round hands it on
            result = await handle.wait(timeout=20)
        finally:
            await survivor.stop()
    assert result == {"step": 0, "slept": 4.0}
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    assert [e.attempt for e in completed] == [2]


async def test_a_survivor_that_cannot_store_its_own_beat_judges_no_worker_dead(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    survivor_store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All workers' beats fail together while a cluster elects a leader: none may take
    the others for dead for a silence that is its own too."""
    own_beat = [float("-inf")]
    survivor = Succession(survivor_store, worker_key("survivor"), beat_stored=lambda: own_beat[0])
    monkeypatch.setattr(survivor, "_ask", _unanswered)  # the beats alone decide
    async with Worker(tools, config) as worker:
        key = worker_key(worker.worker_id)
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 6.0}}])
        await wait_until(lambda: _holds(store, key), timeout=10, message="the step to be held")
        monkeypatch.setattr(worker, "_announce", _silent)  # its beats stop reaching anyone
        await survivor.start()
        try:
            await asyncio.sleep(3.0)  # past dead_after (2 s): a judging survivor claims
            assert not await _claimed(store, key)
            own_beat[0] = float("inf")  # its own beats are stored again: it judges
            result = await handle.wait(timeout=20)
        finally:
            await survivor.stop()
    assert result == {"step": 0, "slept": 6.0}
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    assert [e.attempt for e in completed] == [2]  # handed on once the survivor could judge


def test_an_unanswered_nats_call_counts_as_a_disturbance(survivor_store: Store) -> None:
    """A record remembered before a failover is not trusted after it (`RecentRecords`)."""
    before = disturbances(survivor_store.nc)
    unavailable(TimeoutError())
    assert disturbances(survivor_store.nc) == before + 1


async def _silent(store: Store) -> None:
    pass


async def _unanswered(key: str) -> Asked:
    """A question to a live worker that goes unanswered (its event loop blocked, say), so
    that its silence decides, as the beats alone did before workers answered."""
    return Asked.UNSURE


async def _holds(store: Store, key: str) -> bool:
    return bool(await store.workers.keys(key + ".>"))


async def _claimed(store: Store, key: str) -> bool:
    beat = await store.workers.beat_of(key)
    return beat is not None and beat.claimed_by is not None
