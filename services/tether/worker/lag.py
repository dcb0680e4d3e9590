"""How late this process's event loop runs, from a timer's lateness: a message fetched
waits behind the same queue of ready callbacks as the timer does, so a loop that ran a
timer late may also have handled a message late, after its ack wait ran out and the
server gave it to another worker too."""

from __future__ import annotations

import asyncio
import collections
import time

TICK = 0.05
"""Seconds between the timer's turns."""
NOTED = 0.01
"""Lateness below this is not kept (a loop that keeps up)."""
KEPT = 512
"""Late turns kept (a minute of a loop late on every turn)."""


class LoopLag:
    """The event loop's lateness over time (start it on the loop it measures)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._late: collections.deque[tuple[float, float]] = collections.deque(maxlen=KEPT)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._last = time.monotonic()
        self._timer = asyncio.get_running_loop().call_later(TICK, self._turn)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def stalled(self) -> float:
        """Seconds since the loop last turned (safe to call from any thread)."""
        return time.monotonic() - self._last

    def worst_since(self, since: float) -> float:
        """The most any turn of the loop was late after `since` (monotonic), the turn
        that is due now included."""
        now = time.monotonic()
        worst = max(0.0, now - self._last - TICK)
        for at, late in reversed(self._late):
            if at < since:
                break
            worst = max(worst, late)
        return worst

    def _turn(self) -> None:
        now = time.monotonic()
        late = now - self._last - TICK
        if late > NOTED:
            self._late.append((now, late))
        self._last = now
        self._timer = asyncio.get_running_loop().call_later(TICK, self._turn)
