"""`Service`: what the process roles (worker, dispatcher, API, gateway) have in common."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Self


class Service:
    """Started and stopped by `tether` commands, or used as `async with Role(...):`."""

    _lost: asyncio.Future[str] | None = None

    def connection_lost(self, reason: str) -> None:
        """A connection this service needs is gone for good (see `connect`'s `on_lost`)."""
        lost = self._lost_future()
        if not lost.done():
            lost.set_result(reason)

    def parts(self) -> Sequence[Service]:
        """Services this one runs on (a `Client`, say): losing theirs loses this one."""
        return ()

    @property
    def is_lost(self) -> bool:
        own = self._lost is not None and self._lost.done()
        return own or any(part.is_lost for part in self.parts())

    async def wait_lost(self) -> str:
        """Wait until the service (or a part) can no longer work; returns why. A process
        serving nothing must exit, so its supervisor restarts it."""
        waiters = [asyncio.ensure_future(asyncio.shield(self._lost_future()))]
        waiters += [asyncio.ensure_future(part.wait_lost()) for part in self.parts()]
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return done.pop().result()

    def _lost_future(self) -> asyncio.Future[str]:
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
        return self._lost

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def hurry(self) -> None:
        """A second stop signal while `stop` runs: cut a graceful stop short."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
