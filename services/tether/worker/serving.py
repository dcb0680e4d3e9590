"""A worker's fetch loops: each takes a tool's steps from one of its consumers as the
tool's slots free up, and only while the worker may take them (see `Drain`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tether.nats.delivery import Consumer, Delivery
from tether.worker.draining import DRAIN_LOOK

log = logging.getLogger("tether.worker")
FETCH_TIMEOUT = 1.0
START_AHEAD = 256
"""Messages a worker takes before their tools run: more would wait in this process while
their ack wait runs out (a burst of 10,000 steps is taken a few hundred at a time)."""


async def _take(semaphore: asyncio.Semaphore, most: int) -> int:
    """Acquire one permit (waiting), then as many more as are free, up to `most`."""
    await semaphore.acquire()
    taken = 1
    while taken < most and not semaphore.locked():
        await semaphore.acquire()
        taken += 1
    return taken


def _give(semaphore: asyncio.Semaphore, count: int) -> None:
    for _ in range(count):
        semaphore.release()


async def _hand_back(deliveries: list[Delivery]) -> None:
    """Back to their queue at once, for another worker (unstarted: no attempt counts)."""
    await asyncio.gather(*(delivery.retry() for delivery in deliveries), return_exceptions=True)


class Fetching:
    """The fetch loops of one worker, which share `ahead` (a step's slot and its place
    ahead are given back by the caller of `run`)."""

    def __init__(self, concurrency: int, lost: Callable[[], bool]) -> None:
        self.ahead = asyncio.Semaphore(START_AHEAD)
        self._most = min(concurrency, START_AHEAD)
        self._lost = lost

    async def serve(
        self,
        consumer: Consumer,
        tool: str,
        slots: asyncio.Semaphore,
        stop: asyncio.Event,
        takes: Callable[[], bool],
        run: Callable[[Delivery], None],
    ) -> None:
        """Hand what `consumer` gives out to `run`, while `takes()`, until `stop`."""
        want = 1
        while not (stop.is_set() or self._lost()):
            if not takes():  # draining, and not its build's last worker: paused
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), DRAIN_LOOK)
                want = 1
                continue
            # An idle consumer waits for its next message with one slot: its tool's other
            # consumer (its build's, or the shared one) may take the rest meanwhile.
            free = await _take(slots, want)
            if stop.is_set() or not takes():
                _give(slots, free)
                continue  # stopped while every slot was busy: fetch nothing more
            # Take no more than can start soon: a message's ack wait runs from its delivery.
            ahead = await _take(self.ahead, free)
            _give(slots, free - ahead)
            try:
                deliveries = await consumer.fetch(ahead, FETCH_TIMEOUT, stop)
            except Exception as exc:  # disconnected: nats-py reconnects by itself
                log.warning("fetch for %s failed: %s", tool, exc)
                deliveries = []
                await asyncio.sleep(FETCH_TIMEOUT / 4)
            if deliveries and not takes():
                # Fetched as the drain began: a step started now could be cut short by
                # the drain's end, and run twice.
                await _hand_back(deliveries)
                deliveries = []
            for delivery in deliveries:
                run(delivery)
            _give(slots, ahead - len(deliveries))
            _give(self.ahead, ahead - len(deliveries))
            want = self._most if deliveries else 1
