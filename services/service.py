"""`Service`: what the process roles (worker, dispatcher, API, gateway) have in common."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Service:
    """Started and stopped by `tether` commands, or used as `async with Role(...):`."""

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
