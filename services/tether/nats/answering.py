"""A worker's answers to "are you alive?" (`tether.nats.alive`), given by a thread of
its own on a connection of its own.

Answered from the worker's event loop, a question waits behind everything else the loop
has to do: on a loaded machine (or under a tool that calls blocking code) it went
unanswered for seconds, and the others took a live worker for dead and ran its held
steps again. The thread answers within milliseconds however busy the loop is, and only
while the loop still turns (within `stall`) and its connection is not closed for good:
a loop blocked for longer is as good as dead, and is taken for dead as before. The
process's death drops this connection with the other, so "no responders" still tells
it at once. The worker's own connection answers too (`serve_alive`): a question has its
answer from whichever comes first, and from the loop alone should this thread fail.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable

from nats.aio.client import Client as NatsClient

from tether.nats.alive import serve_alive
from tether.nats.connection import NatsConfig, close, connect

log = logging.getLogger("tether.nats")
STOP_WITHIN = 5.0
"""Seconds a stop waits for the thread to close its connection."""


class Answering:
    """Answers on `subject` from a thread, while the worker's event loop has not stalled
    (`stalled`: seconds since it last turned) for `stall` seconds and `main` (the worker's
    connection) is not closed."""

    def __init__(
        self,
        config: NatsConfig,
        subject: str,
        main: NatsClient,
        stalled: Callable[[], float],
        stall: float,
    ) -> None:
        self._config = dataclasses.replace(config, name=f"{config.name}-alive")
        self._subject = subject
        self._main = main
        self._stalled = stalled
        self._stall = stall
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="tether-alive", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def start(self) -> None:
        """Once this returns the server has the subscription (it raises what the
        connection raised: NATS away, credentials refused)."""
        self._thread.start()
        try:
            await asyncio.wrap_future(self._ready)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop answering: from now on questions get "no responders"."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop ended already
                loop.call_soon_threadsafe(stop.set)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, STOP_WITHIN)

    def _answers(self) -> bool:
        return self._stalled() <= self._stall and not self._main.is_closed

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            nc = await connect(self._config)
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        try:
            await serve_alive(nc, self._subject, self._answers)
        except BaseException as exc:
            await close(nc)
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await close(nc)
