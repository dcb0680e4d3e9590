"""Request/reply: `ask` for a service's answer, with the transport's failures as
Tether's errors, and `Requester` for the hot path (one wildcard inbox, counter tokens,
one timeout sweep).

A worker makes about a dozen JetStream requests per task. nats-py's `request` reads
random bytes from the OS for each token and arms a timer and a `wait_for` per call;
here a token is a counter and a single periodic sweep fails the requests that ran out
of time, which halves the client-side cost of a request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from tether.errors import NatsUnavailableError, NotAllowedError
from tether.nats.connection import Refused, unless_refused
from tether.nats.headers import STATUS
from tether.nats.limits import check_message

if TYPE_CHECKING:
    from tether.nats.store import Store

NO_RESPONDERS = "503"
SWEEP_EVERY = 0.25
R = TypeVar("R")


async def ask(store: Store, subject: str, data: bytes, timeout: float, unanswered: str) -> bytes:
    """The reply to one request to a service on `subject`. A subject the server refuses
    this user fails at once with NotAllowedError (nats-py would wait out the timeout);
    no responders, or no answer within `timeout` seconds, is NatsUnavailableError with
    the message `unanswered` (who should answer, and how to start it)."""
    nc = store.nc
    asked = nc.request(subject, data, timeout=timeout)
    try:
        reply = await unless_refused(nc, asked, subject)
    except Refused as exc:
        raise NotAllowedError(subject, str(exc).removeprefix("nats: ")) from None
    except (NoRespondersError, NatsTimeoutError) as exc:
        raise NatsUnavailableError(unanswered) from exc
    return reply.data


async def allowed(store: Store, call: Awaitable[R], about: str) -> R:
    """`call`, or NotAllowedError as soon as the server refuses this user a publish that
    mentions `about` (a subject or its start): nats-py would wait out the timeout."""
    try:
        return await unless_refused(store.nc, call, about)
    except Refused as exc:
        raise NotAllowedError(about, str(exc).removeprefix("nats: ")) from None


class Requester:
    """Sends requests on `nc` and matches replies by token; `timeout` is in seconds."""

    def __init__(self, nc: NatsClient, timeout: float) -> None:
        self._nc = nc
        self._timeout = timeout
        self._prefix = ""
        self._count = 0
        self._waiting: dict[str, tuple[asyncio.Future[Msg], float]] = {}
        self._sweep_timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        self._prefix = self._nc.new_inbox() + "."
        await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)

    async def request(self, subject: str, data: bytes, headers: dict[str, str] | None) -> Msg:
        """The reply to one request; NoRespondersError or nats' TimeoutError otherwise
        (MessageTooLargeError, before sending, for what the server would refuse)."""
        check_message(subject, data, headers, self._nc.max_payload)
        loop = asyncio.get_running_loop()
        self._count += 1
        token = str(self._count)
        future: asyncio.Future[Msg] = loop.create_future()
        self._waiting[token] = (future, loop.time() + self._timeout)
        if self._sweep_timer is None:
            self._sweep_timer = loop.call_later(SWEEP_EVERY, self._sweep)
        try:
            await self._nc.publish(subject, data, reply=self._prefix + token, headers=headers)
            reply = await future
        finally:
            self._waiting.pop(token, None)
        if not reply.data and reply.headers and reply.headers.get(STATUS) == NO_RESPONDERS:
            raise NoRespondersError
        return reply

    async def _on_reply(self, msg: Msg) -> None:
        waiting = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if waiting is not None and not waiting[0].done():
            waiting[0].set_result(msg)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired = [token for token, (_, deadline) in self._waiting.items() if deadline <= now]
        for token in expired:
            future, _ = self._waiting.pop(token)
            if not future.done():
                future.set_exception(NatsTimeoutError())
        self._sweep_timer = loop.call_later(SWEEP_EVERY, self._sweep) if self._waiting else None
