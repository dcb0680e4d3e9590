"""The event loop a saver's connection lives on, reached from any thread or loop.

A NATS connection belongs to the loop it was opened on. The saver's async methods run
there directly when called on it, and hop to it (awaiting the result) from any other
loop; its sync methods hand the call to it and wait, which works from a thread with no
loop and from a thread whose own loop is busy. A saver opened from a URL runs its
connection on a private loop in a daemon thread of its own, as LangGraph's sync
adapters do; a saver given a connection uses that connection's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
Call = Callable[[], Coroutine[Any, Any, R]]


class _End:
    """What stepping a generator gives once it is done (a StopAsyncIteration cannot
    cross a future)."""


_END = _End()


class WrongLoopError(RuntimeError):
    """A sync method of the saver was called on the loop its connection runs on (it
    would wait for itself for ever), or with no loop running the connection."""


class Home:
    """Where the connection's loop is: known at once (a private loop), or adopted at the
    first async call (a connection given by the caller, whose loop that is)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, thread: threading.Thread | None = None
    ) -> None:
        self.loop = loop
        self._thread = thread

    @classmethod
    def private(cls, name: str) -> Home:
        """A new loop running in a daemon thread named `name`."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
        thread.start()
        return cls(loop, thread)

    def adopt(self) -> None:
        """Take the running loop as home, unless one is known."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()

    async def run(self, call: Call[R]) -> R:
        """`call()` on the home loop, awaited from whichever loop this runs on."""
        self.adopt()
        loop = self.loop
        assert loop is not None
        if asyncio.get_running_loop() is loop:
            return await call()
        if loop.is_closed() or not loop.is_running():
            raise WrongLoopError(
                "JetStreamSaver's NATS connection belongs to an event loop that is no longer "
                "running: give the saver a connection opened on this loop, or a URL"
            )
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), loop))

    def wait(self, call: Call[R]) -> R:
        """`call()` on the home loop, from a thread that is not running it."""
        loop = self._reachable()
        return asyncio.run_coroutine_threadsafe(call(), loop).result()

    def _reachable(self) -> asyncio.AbstractEventLoop:
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is loop:
            raise WrongLoopError(
                "a sync method of JetStreamSaver was called on the event loop its NATS "
                "connection runs on, which would wait for itself: use the async methods "
                "there (`await saver.aget_tuple(...)`, `await graph.ainvoke(...)`), or open "
                "the saver from a URL so that it runs a loop of its own"
            )
        if loop is None or loop.is_closed() or not loop.is_running():
            raise WrongLoopError(
                "JetStreamSaver's NATS connection has no running event loop to serve a sync "
                "call: open the saver from a URL (JetStreamSaver(url) or "
                "JetStreamSaver.from_conn_string(url)), which runs a loop of its own"
            )
        return loop

    async def stream(self, make: Callable[[], AsyncGenerator[T, None]]) -> AsyncIterator[T]:
        """The items of the generator `make()` runs on the home loop, one at a time."""
        self.adopt()
        generator = make()
        if asyncio.get_running_loop() is self.loop:
            async for item in generator:
                yield item
            return
        try:
            while not isinstance(step := await self.run(lambda: _step(generator)), _End):
                yield step
        finally:
            await self.run(lambda: _close(generator))

    def iterate(self, make: Callable[[], AsyncGenerator[T, None]]) -> Iterator[T]:
        """The items of the generator `make()` runs on the home loop, for sync code."""
        self._reachable()
        generator = make()
        try:
            while not isinstance(item := self.wait(lambda: _step(generator)), _End):
                yield item
        finally:
            if self.loop is not None and self.loop.is_running():
                self.wait(lambda: _close(generator))

    def close(self) -> None:
        """Stop the private loop (a no-op for an adopted one)."""
        if self._thread is None or self.loop is None:
            return
        loop, thread = self.loop, self._thread
        self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join()
            loop.close()


async def _step(generator: AsyncGenerator[T, None]) -> T | _End:
    try:
        return await anext(generator)
    except StopAsyncIteration:
        return _END


async def _close(generator: AsyncGenerator[Any, None]) -> None:
    await generator.aclose()
