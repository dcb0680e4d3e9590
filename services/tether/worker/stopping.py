"""How long a stopping worker waits for the steps it holds (`Worker.stop`)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any


class StopClock:
    """The deadline of a stop: the drain's or the grace's. `hurry` (a second Ctrl-C or
    SIGTERM) brings it to the grace from now, and a wait under way sees the new one."""

    def __init__(self, seconds: float, grace: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._grace = grace
        self.deadline = self._loop.time() + seconds
        self._moved = asyncio.Event()

    def hurry(self) -> None:
        self.deadline = min(self.deadline, self._loop.time() + self._grace)
        self._moved.set()

    def left(self) -> float:
        return max(0.0, self.deadline - self._loop.time())

    async def wait(self, waits: Collection[asyncio.Future[Any]]) -> set[asyncio.Future[Any]]:
        """Wait until all of `waits` are done or the deadline passes; those not done."""
        pending: set[asyncio.Future[Any]] = {wait for wait in waits if not wait.done()}
        while pending and self.left() > 0:
            self._moved.clear()
            moved = asyncio.ensure_future(self._moved.wait())
            try:
                _, pending = await asyncio.wait(
                    {*pending, moved}, timeout=self.left(), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                moved.cancel()
            pending.discard(moved)
        return pending
