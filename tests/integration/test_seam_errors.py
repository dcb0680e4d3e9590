"""The seam's errors are honest: a lost compare-and-set is an outcome, not an outage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import msgspec
import pytest

from tether import NatsConfig
from tether.errors import JetStreamError, NatsUnavailableError, RevisionConflictError
from tether.nats.connection import close, connect
from tether.nats.layout import Layout
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas.codec import encode
from tether.schemas.workers import HeldStep, WorkerBeat
from tether.worker.succession import Succession


@pytest.fixture
async def stores(config: NatsConfig) -> AsyncIterator[list[Store]]:
    """Two survivors, each on its own connection as two worker processes would be."""
    connections = [await connect(config) for _ in range(2)]
    try:
        yield [await Store.open(nc, Layout(names=config.names)) for nc in connections]
    finally:
        for nc in connections:
            await close(nc)


async def test_a_lost_compare_and_set_is_a_revision_conflict(stores: list[Store]) -> None:
    store = stores[0]
    first = await store.workers.put_entry("k", b"one")
    await store.workers.put_entry("k", b"two", last=first)
    with pytest.raises(RevisionConflictError) as lost:
        await store.workers.put_entry("k", b"three", last=first)
    assert not isinstance(lost.value, NatsUnavailableError)
    assert (await store.workers.entry("k")) is not None


async def test_another_jetstream_refusal_keeps_its_code(stores: list[Store]) -> None:
    await stores[0].js.delete_stream(stores[0].names.index_stream)
    with pytest.raises(JetStreamError) as refused:
        await stores[0].records.index_is_empty()
    assert refused.value.err_code == 10059
    assert not isinstance(refused.value, NatsUnavailableError)


async def test_two_survivors_racing_for_a_dead_worker_hand_each_step_on_once(
    stores: list[Store], caplog: pytest.LogCaptureFixture
) -> None:
    names = stores[0].names
    dead = worker_key("w-dead")
    now = datetime.now(UTC)
    beat = WorkerBeat(
        worker_id="w-dead", tools=["t"], concurrency=1, in_flight=3, started_at=now, time=now
    )
    await stores[0].workers.put_entry(dead, encode(beat))
    for n in range(3):
        held = HeldStep(
            subject=names.work_subject("t"),
            msg_id=f"race.{n}",
            attempt=1,
            work=msgspec.Raw(b'{"task_id":"race"}'),
        )
        await stores[0].workers.put_entry(f"{dead}.race.{n}", encode(held))
    # Both survivors read the dead worker's beat before either claims it: one claim loses.
    both_read = asyncio.Barrier(2)
    for store in stores:
        read = store.workers.entry

        async def read_then_meet(key: str, read=read) -> tuple[bytes, int] | None:  # type: ignore[no-untyped-def]
            found = await read(key)
            if key == dead:
                await both_read.wait()
            return found

        store.workers.entry = read_then_meet  # type: ignore[method-assign]
    survivors = [Succession(store, worker_key(f"s{i}")) for i, store in enumerate(stores)]
    with caplog.at_level(logging.WARNING, logger="tether"):
        handed_on = await asyncio.gather(*(s.take_over(dead) for s in survivors))
    assert sorted(handed_on) == [0, 3]
    assert not [r for r in caplog.records if "could not" in r.getMessage()]
    info = await stores[0].js.stream_info(names.work_stream)
    assert info.state.messages == 3
