"""A worker whose event loop is slow answers a question late (issue 51, item 2): later
than a question waits, but before its silence would end. Its answer still counts, so it
is never taken for dead however late its beats."""

from __future__ import annotations

import asyncio
import time

from nats.aio.msg import Msg

from tether import NatsConfig
from tether.clock import utcnow
from tether.nats.connection import close, connect
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas.workers import WorkerBeat
from tether.worker.liveness import Liveness
from tether.worker.succession import Succession

ANSWER_AFTER = 0.8
"""Each answer's delay: past the 0.5 s a question waits (`Liveness.ask_within`)."""
JUDGED_FOR = 5.0
"""How long the judge watches the slow worker: two and a half times `dead_after`."""


async def test_a_worker_that_answers_later_than_a_question_waits_is_not_taken_for_dead(
    config: NatsConfig, store: Store
) -> None:
    nc = await connect(config)
    judge = Succession(store, worker_key("judge"), Liveness(dead_after=2.0))
    try:

        async def answer_late(msg: Msg) -> None:
            await asyncio.sleep(ANSWER_AFTER)
            await nc.publish(msg.reply)

        await nc.subscribe(store.names.alive_subject("slow"), cb=answer_late)
        await nc.flush()
        now = utcnow()
        beat = WorkerBeat(
            worker_id="slow", tools=["fast"], concurrency=1, started_at=now, time=now, answers=True
        )
        await store.workers.announce(beat)  # its last beat: from now on it only answers
        await judge.start()
        started = time.monotonic()
        while time.monotonic() - started < JUDGED_FOR:
            stored = await store.workers.beat_of("slow")
            assert stored is not None and stored.claimed_by is None, "taken for dead"
            await asyncio.sleep(0.2)
    finally:
        await judge.stop()
        await close(nc)
