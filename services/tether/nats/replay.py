"""Reading a subject of a stream from a sequence on, through restarts and network cuts.

One object closes itself and starts its ordered consumer again after the last stream
sequence it handed out whenever the connection came back (a restarted server has lost
the ephemeral consumer; a cut one may have dropped messages on the way), so a follower
neither loses nor repeats a message. While NATS is away it says so once, and after
`give_up_after` seconds it raises NatsUnavailableError instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from types import TracebackType

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from tether.cancellation import raise_if_cancelled
from tether.errors import NatsUnavailableError

log = logging.getLogger("tether.nats")
POLL = 0.5
"""Seconds between looks at the connection while nothing arrives."""
GIVE_UP_AFTER = 60.0
"""Seconds without NATS after which a follower stops waiting for it."""


class Replay:
    """The messages on `subject` of `stream` after sequence `after` (0: all), in order."""

    def __init__(
        self,
        nc: NatsClient,
        js: JetStreamContext,
        stream: str,
        subject: str,
        after: int = 0,
        give_up_after: float = GIVE_UP_AFTER,
    ) -> None:
        self._nc = nc
        self._js = js
        self._stream = stream
        self._subject = subject
        self._give_up_after = give_up_after
        self._sub: Subscription | None = None
        self._reconnects = -1
        self._away_since: float | None = None
        self.seen = after
        """The stream sequence of the last message handed out."""

    async def __aenter__(self) -> Replay:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether NATS is here now (else reads of the record would fail too)."""
        return bool(self._nc.is_connected)

    async def next(self, timeout: float | None = None) -> Msg | None:
        """The next message; None when none came within `timeout` (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            raise_if_cancelled()  # next_msg can eat the cancel that ends the feed
            left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if left <= 0:
                return None
            msg = await self._read(left)
            if msg is not None:
                return msg

    async def _read(self, wait: float) -> Msg | None:
        sub = await self._subscription()
        if sub is None:
            await asyncio.sleep(wait)
            return None
        try:
            msg = await sub.next_msg(timeout=wait)
        except nats.errors.TimeoutError:
            return None
        except (nats.errors.Error, OSError):  # the connection went: start again when back
            await self._drop()
            return None
        sequence = int(msg.metadata.sequence.stream)
        if sequence <= self.seen:
            return None  # delivered again by a consumer that started over
        self.seen = sequence
        return msg

    async def _subscription(self) -> Subscription | None:
        """The consumer to read from, started (again) when needed; None while NATS is away."""
        nc = self._nc
        if nc.is_closed:
            what = self._subject
            raise NatsUnavailableError(f"the NATS connection closed while following {what}")
        if not nc.is_connected:
            self._away()
            return None
        if self._sub is not None and nc.stats["reconnects"] == self._reconnects:
            return self._sub
        await self._drop()
        start = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        if self.seen:
            start = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.seen + 1
            )
        reconnects = nc.stats["reconnects"]
        try:
            self._sub = await self._js.subscribe(
                self._subject, stream=self._stream, ordered_consumer=True, config=start
            )
        except (nats.errors.Error, OSError) as exc:  # JetStream not ready yet after a restart
            log.debug("following %s: %s", self._subject, exc)
            self._away()
            return None
        self._reconnects = reconnects
        if self._away_since is not None:
            log.warning("NATS is back: following %s again", self._subject)
            self._away_since = None
        return self._sub

    def _away(self) -> None:
        now = time.monotonic()
        if self._away_since is None:
            self._away_since = now
            log.warning(
                "lost NATS while following %s; resuming after sequence %d when it is back",
                self._subject,
                self.seen,
            )
        elif now - self._away_since > self._give_up_after:
            raise NatsUnavailableError(
                f"NATS has been away for {self._give_up_after:.0f}s while following "
                f"{self._subject}: check that the server is up, then follow it again"
            )

    async def _drop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def close(self) -> None:
        await self._drop()
