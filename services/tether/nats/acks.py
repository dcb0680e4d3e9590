"""Acks that go out with a connection's next write.

A step's `+ACK` comes last, once the next step's message is stored; sent on its own it
costs a socket write of its own (on a 2-core machine, a tenth of a step's time on the
worker), while a moment later the worker writes anyway: the next step's `step_started`,
its pull request, its checkpoint. So the ack waits for that write, or `LINGER` at most.
Nothing waits for an ack (a lost one only brings a redelivery, which the protocol turns
into a no-op), so the ack being a little later changes no outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.aio.msg import Msg

log = logging.getLogger("tether.nats")
LINGER = 0.002
"""Seconds an ack waits for a write to go with, when the connection writes nothing else."""


class Acks:
    """The acks of one connection waiting for its next write (`send`)."""

    def __init__(self) -> None:
        self._waiting: list[Msg] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def add(self, msg: Msg) -> None:
        """Acknowledge `msg` with the connection's next write."""
        self._waiting.append(msg)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(LINGER, self._due)

    async def send(self) -> None:
        """Send the acks waiting: call it just before a write, so that they share it."""
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for msg in waiting:
            try:
                await msg.ack()  # queued for the write that follows: no wait here
            except Exception as exc:  # NATS away: the message comes back, and is a no-op
                log.debug("ack of %s not sent: %s", msg.subject, exc)

    def _due(self) -> None:
        self._timer = None
        if self._waiting:
            task = asyncio.ensure_future(self.send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def close(self) -> None:
        """Send what waits now (before the connection closes)."""
        await self.send()
        if self._sending:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._sending)
