"""A worker that starts after another died counts that one's silence from its last beat,
read by the server's clock, not from its own start: a replacement takes a crashed worker's
held steps over `dead_after` after the crash, as a survivor already running would."""

from __future__ import annotations

import asyncio
import time

from tether.clock import utcnow
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas.workers import WorkerBeat
from tether.testing import eventually
from tether.worker.succession import Succession


def _beat(worker_id: str) -> WorkerBeat:
    now = utcnow()
    return WorkerBeat(worker_id=worker_id, tools=["slow"], concurrency=1, started_at=now, time=now)


async def test_silences_are_read_by_the_servers_clock_against_ones_own_beat(
    store: Store,
) -> None:
    await store.workers.announce(_beat("died"))
    await asyncio.sleep(0.6)  # time apart: the dead one's last beat is older than ours
    await store.workers.announce(_beat("started"))

    silent = await store.workers.silences(
        [worker_key("died"), worker_key("never")], worker_key("started")
    )
    assert set(silent) == {worker_key("died")}  # one that never beat has no silence
    assert 0.5 <= silent[worker_key("died")] < 5


async def test_a_new_worker_counts_a_dead_ones_silence_from_its_last_beat(store: Store) -> None:
    await store.workers.announce(_beat("crashed"))
    await asyncio.sleep(0.6)
    await store.workers.announce(_beat("replacement"))
    succession = Succession(store, worker_key("replacement"))
    started = time.monotonic()
    await succession.start()
    try:
        seen = succession._seen
        assert seen[worker_key("crashed")] <= started - 0.5
        assert seen[worker_key("replacement")] >= started

        async def taken_over() -> None:  # and its watch goes on: the dead one is claimed
            beat = await store.workers.beat_of(worker_key("crashed"))
            assert beat is None or beat.claimed_by == worker_key("replacement"), beat

        await eventually(taken_over, timeout=10)
    finally:
        await succession.stop()
