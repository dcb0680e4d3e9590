"""A worker's fetch loops: each takes a tool's steps from one of its consumers as the
tool's slots free up, and only while the worker may take them (see `Drain`)."""

from __future__ import annotations

import asyncio
import collections
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


class Slots:
    """Places a fetch loop takes many of at once: one wait for the first, then all that
    are free up to a limit, in one step (an `asyncio.Semaphore` takes them one `await`
    at a time: a hundred per fetch, on every step's path). First come, first served, as
    a semaphore: a loop that comes back for more waits behind one already waiting (the
    loop of a build's consumer must not starve behind its tool's shared one)."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, most: int) -> int:
        """Wait for one place, then take as many more as are free, up to `most`, unless
        another waits."""
        if self.free > 0 and not self._waiting:
            self.free -= 1
        else:
            handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(handed)
            try:
                await handed  # `give` keeps a place for it
            except asyncio.CancelledError:
                if handed.cancelled():
                    if handed in self._waiting:  # (`give` may have passed it over already)
                        self._waiting.remove(handed)
                    self.give(0)  # no one waits behind a cancelled taker
                else:
                    self.give(1)  # handed one, and cancelled before it woke: back
                raise
        more = 0 if self._waiting else min(most - 1, self.free)
        self.free -= more
        return 1 + more

    def give(self, count: int = 1) -> None:
        """Give `count` places back, to the waiters first, in their order."""
        self.free += count
        while self.free > 0 and self._waiting:
            handed = self._waiting.popleft()
            if not handed.done():  # (one whose taker was cancelled is done)
                self.free -= 1
                handed.set_result(None)


async def _hand_back(deliveries: list[Delivery]) -> None:
    """Back to their queue at once, for another worker (unstarted: no attempt counts)."""
    await asyncio.gather(*(delivery.retry() for delivery in deliveries), return_exceptions=True)


class Fetching:
    """The fetch loops of one worker, which share `ahead` (a step's slot and its place
    ahead are given back by the caller of `run`)."""

    def __init__(self, concurrency: int, lost: Callable[[], bool]) -> None:
        self.ahead = Slots(START_AHEAD)
        self._most = min(concurrency, START_AHEAD)
        self._lost = lost

    async def serve(
        self,
        consumer: Consumer,
        tool: str,
        slots: Slots,
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
            free = await slots.take(want)
            if stop.is_set() or not takes():
                slots.give(free)
                continue  # stopped while every slot was busy: fetch nothing more
            # Take no more than can start soon: a message's ack wait runs from its delivery.
            ahead = await self.ahead.take(free)
            slots.give(free - ahead)
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
            slots.give(ahead - len(deliveries))
            self.ahead.give(ahead - len(deliveries))
            want = self._most if deliveries else 1
