"""`Service`: what the process roles (worker, dispatcher, API, gateway) have in common."""

from __future__ import annotations

import asyncio
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

    @property
    def is_lost(self) -> bool:
        return self._lost is not None and self._lost.done()

    async def wait_lost(self) -> str:
        """Wait until the service can no longer work; returns why. A process serving
        nothing must exit, so its supervisor restarts it."""
        return await asyncio.shield(self._lost_future())

    def _lost_future(self) -> asyncio.Future[str]:
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
        return self._lost

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

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
