"""A message being worked on, and the pull consumers that hand them out.

Every JetStream verb on a work or submit message is called here, and nowhere else:
done → `+ACK`, retry → `-NAK` with a delay, give up → `+TERM`, extend → `+WPI`. A
delivery handed to its worker's custody (`hold`) is acknowledged at once and settled
through the custody instead (see `tether.worker.custody`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from tether.nats.acks import Acks
from tether.nats.headers import MSG_ID, PRIOR_ATTEMPTS


class Keeper(Protocol):
    """Where a held delivery lives: the worker's `tether.worker.custody.Custody` (the
    seam names only what it needs of it)."""

    async def hold(self, delivery: Delivery) -> str: ...
    async def release(self, key: str) -> None: ...
    def forget(self, key: str) -> None: ...
    async def reissue(self, delivery: Delivery, key: str, delay: timedelta | None) -> None: ...


class Delivery:
    """One delivery of a message from a durable pull consumer; `acks`, where given, sends
    its `+ACK` with the connection's next write (see `tether.nats.acks`)."""

    def __init__(self, msg: Msg, acks: Acks | None = None, asked_at: float | None = None) -> None:
        self._msg = msg
        self._acks = acks
        self.subject: str = msg.subject
        self.data: bytes = msg.data
        self._keeper: Keeper | None = None
        """Set once the step is held: its copy stored *and* its message's ack confirmed."""
        self._held = ""
        self._copy: tuple[Keeper, str] | None = None
        """The keeper and key of a stored copy whose ack is not confirmed yet."""
        self._settling = asyncio.Lock()  # a hold and a settlement never interleave
        self._settled = False
        headers = msg.headers or {}
        self._prior = int(headers.get(PRIOR_ATTEMPTS) or 0)
        self._counted = 0
        self._again = False
        self.msg_id: str = headers.get(MSG_ID) or f"s{self.stream_sequence}"
        self.ack_subject: str | None = msg.reply or None
        self._fetched = time.monotonic()
        self.asked_at = self._fetched if asked_at is None else asked_at
        """When (monotonic) the fetch that brought it was asked for: the server sent it
        between then and `waited` ago."""

    @property
    def waited(self) -> float:
        """Seconds since it was fetched: its ack wait runs from then."""
        return time.monotonic() - self._fetched

    @property
    def attempt(self) -> int:
        """Attempts of this step so far, this one included: as counted by the worker
        (`count`), else the delivery count (as far as the consumer remembers) plus those
        of the messages this one replaced."""
        return self._counted or self._prior + self.delivered

    @property
    def prior(self) -> int:
        """Attempts of the messages this one replaced (`Tether-Prior-Attempts`)."""
        return self._prior

    @property
    def delivered(self) -> int:
        """How often JetStream handed this message out, as far as the consumer remembers."""
        return int(self._msg.metadata.num_delivered)

    @property
    def came_back(self) -> bool:
        """Whether this delivery may not be its message's only one: delivered before,
        published again after earlier attempts, or handled again after NATS was away
        (its ack wait may have run out meanwhile, and the message gone to another)."""
        return self._prior > 0 or self.delivered > 1 or self._again

    def handle_again(self) -> None:
        """It is handled again in place, after NATS was away (see `came_back`)."""
        self._again = True

    def count(self, attempt: int) -> None:
        """The attempt this delivery is, as the worker counted it (only deliveries that
        started count: see `tether.worker.runs`)."""
        self._counted = attempt

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._msg.headers or {})

    @property
    def stream_sequence(self) -> int:
        return int(self._msg.metadata.sequence.stream)

    @property
    def held(self) -> bool:
        return self._keeper is not None

    @property
    def held_key(self) -> str:
        """The key its keeper holds it under ("" when not held)."""
        return self._held

    async def hold(self, keeper: Keeper) -> None:
        """Hand the step to `keeper` (stored there first), then acknowledge the message:
        from here on, holding it costs JetStream nothing."""
        async with self._settling:
            if self._settled or self._keeper is not None:
                return
            if self._copy is None:
                self._copy = (keeper, await keeper.hold(self))
            # Held only once JetStream confirms the ack: until then the caller goes on
            # extending the message (a timed-out ack may not have landed, and a message
            # neither extended nor acknowledged would be delivered again mid-run).
            await self._msg.ack_sync()
            self._keeper, self._held = self._copy
            self._copy = None

    async def done(self) -> None:
        await self._settle(lambda keeper, key: keeper.release(key), self._ack)

    async def _ack(self) -> None:
        if self._acks is None:
            await self._msg.ack()
        else:
            self._acks.add(self._msg)

    async def retry(self, delay: timedelta | None = None) -> None:
        """Deliver again after `delay` (a bare nak would skip the consumer's backoff)."""
        seconds = None if delay is None else delay.total_seconds()
        await self._settle(
            lambda keeper, key: keeper.reissue(self, key, delay),
            lambda: self._msg.nak(delay=seconds),
        )

    async def give_up(self) -> None:
        """Never deliver again (the caller dead-lettered it first)."""
        await self._settle(lambda keeper, key: keeper.release(key), self._msg.term)

    async def _settle(
        self,
        by_keeper: Callable[[Keeper, str], Awaitable[None]],
        by_message: Callable[[], Awaitable[None]],
    ) -> None:
        """Settle once: through the keeper when held, else on the message itself."""
        async with self._settling:
            if self._settled:
                return
            self._settled = True
            if self._keeper is not None:
                await by_keeper(self._keeper, self._held)
                return
            await by_message()
            if self._copy is not None:  # stored, its ack never confirmed: not needed now
                keeper, key = self._copy
                await keeper.release(key)

    def abandon(self) -> None:
        """Another worker took the held step over (this one was taken for dead): settle
        nothing, its copy is the other's now."""
        if self._keeper is not None and not self._settled:
            self._settled = True
            self._keeper.forget(self._held)

    @property
    def settled(self) -> bool:
        return self._settled

    async def extend(self) -> None:
        """Still working: restart the ack-wait clock (a held step has none)."""
        if self._keeper is None:
            await self._msg.in_progress()


PROBE_S = 0.05
"""Seconds a fetch of more than one waits for the server to say what it has now."""


class Consumer:
    """A bound durable pull consumer: `fetch` up to n deliveries at a time; with `acks`,
    their `+ACK`s go with the connection's next write."""

    def __init__(
        self, subscription: JetStreamContext.PullSubscription, acks: Acks | None = None
    ) -> None:
        self._subscription = subscription
        self._acks = acks
        self._stopped: dict[asyncio.Event, asyncio.Future[object]] = {}

    @classmethod
    async def bind(
        cls, js: JetStreamContext, stream: str, durable: str, acks: Acks | None = None
    ) -> Consumer:
        return cls(await js.pull_subscribe_bind(durable, stream), acks)

    async def backlog(self) -> tuple[int, int]:
        """(queued, delivered and not yet acknowledged) messages of the consumer."""
        info = await self._subscription.consumer_info()
        return int(info.num_pending or 0), int(info.num_ack_pending or 0)

    async def fetch(
        self, batch: int, timeout: float, stop: asyncio.Event | None = None
    ) -> list[Delivery]:
        """Up to `batch` deliveries; an empty list when none came within `timeout`, or
        at once when `stop` is set meanwhile (a process stopping does not wait out an
        idle fetch; a message the server sent as it was given up comes back after its
        ack wait). Other failures (NATS away) raise, for the caller to log and retry."""
        if stop is None:
            return await self._fetch(batch, timeout)
        if stop.is_set():
            return []
        # One waiter per stop event for the consumer's life, not two tasks and a wait per
        # fetch: this is on every step's path.
        stopped = self._stopped.get(stop)
        if stopped is None:
            stopped = self._stopped[stop] = asyncio.ensure_future(stop.wait())
        fetched = asyncio.ensure_future(self._fetch(batch, timeout))

        def cut_short(_: object) -> None:
            fetched.cancel()

        stopped.add_done_callback(cut_short)
        try:
            return await fetched
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if stop.is_set() and not (current and current.cancelling()):
                return []  # cut short by the stop, not cancelled itself
            raise
        finally:
            stopped.remove_done_callback(cut_short)

    async def _fetch(self, batch: int, timeout: float) -> list[Delivery]:
        if self._acks is not None:
            await self._acks.send()  # with the pull request
        asked_at = time.monotonic()
        try:
            msgs = await self._take(batch, timeout)
        except TimeoutError:
            return []
        return [Delivery(msg, self._acks, asked_at) for msg in msgs]

    async def _take(self, batch: int, timeout: float) -> list[Msg]:
        """What is there now, up to `batch`, at once; else one, as soon as it comes.
        nats-py's own wait for more would hold a message that came first until `timeout`
        for a batch to fill: its ack wait running out meanwhile, and the step's start late."""
        if batch > 1:
            try:
                return await self._subscription.fetch(batch, timeout=PROBE_S)
            except TimeoutError:
                pass  # nothing there: wait for the next one
        return await self._subscription.fetch(1, timeout=timeout)
