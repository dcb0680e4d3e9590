"""Where a suspect step runs alone: a worker's steps share it, and a step that has died
twice (`runs.Count.alone`) waits until nothing else runs, then runs with no step beside
it, so that a death then is its own (see `tether.worker.runs`).

One per `Worker` (a process runs one; two in one process would each keep their own).
Ordinary steps pass through without waiting (no await, nothing on the hot path) unless a
suspect runs or waits; a waiting suspect goes before steps that come after it, so a busy
worker cannot keep it waiting for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Quarantine:
    def __init__(self) -> None:
        self._beside = 0
        """Steps running now that may run beside others."""
        self._suspects = 0
        """Suspects running (at most one) or waiting to."""
        self._alone = False
        """A suspect runs."""
        self._changed = asyncio.Condition()

    @property
    def busy(self) -> bool:
        """Whether a suspect would have to wait to run alone now."""
        return self._beside > 0 or self._suspects > 0

    @asynccontextmanager
    async def beside(self) -> AsyncIterator[None]:
        """Run an ordinary step: at once, unless a suspect runs or waits."""
        if self._suspects:
            async with self._changed:
                await self._changed.wait_for(lambda: not self._suspects)
        self._beside += 1
        try:
            yield
        finally:
            self._beside -= 1
            if self._suspects:
                await self._notify()

    @asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Run a suspect once nothing else runs; nothing else starts until it ends."""
        self._suspects += 1
        try:
            async with self._changed:
                # One suspect at a time: the first to find the worker empty takes it.
                await self._changed.wait_for(lambda: self._beside == 0 and not self._alone)
                self._alone = True
            try:
                yield
            finally:
                self._alone = False
        finally:
            self._suspects -= 1
            await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
