"""A message being worked on, and the pull consumers that hand them out.

Every JetStream verb on a work or submit message is called here, and nowhere else:
done → `+ACK`, retry → `-NAK` with a delay, give up → `+TERM`, extend → `+WPI`.
"""

from __future__ import annotations

from datetime import timedelta

from nats.aio.msg import Msg
from nats.js import JetStreamContext


class Delivery:
    """One delivery of a message from a durable pull consumer."""

    def __init__(self, msg: Msg) -> None:
        self._msg = msg
        self.subject: str = msg.subject
        self.data: bytes = msg.data

    @property
    def attempt(self) -> int:
        """The delivery count (1 on a first delivery, as far as the consumer remembers)."""
        return int(self._msg.metadata.num_delivered)

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._msg.headers or {})

    @property
    def stream_sequence(self) -> int:
        return int(self._msg.metadata.sequence.stream)

    async def done(self) -> None:
        await self._msg.ack()

    async def retry(self, delay: timedelta | None = None) -> None:
        """Deliver again after `delay` (a bare nak would skip the consumer's backoff)."""
        await self._msg.nak(delay=None if delay is None else delay.total_seconds())

    async def give_up(self) -> None:
        """Never deliver again (the caller dead-lettered it first)."""
        await self._msg.term()

    async def extend(self) -> None:
        """Still working: restart the ack-wait clock."""
        await self._msg.in_progress()


class Consumer:
    """A bound durable pull consumer: `fetch` up to n deliveries at a time."""

    def __init__(self, subscription: JetStreamContext.PullSubscription) -> None:
        self._subscription = subscription

    @classmethod
    async def bind(cls, js: JetStreamContext, stream: str, durable: str) -> Consumer:
        return cls(await js.pull_subscribe_bind(durable, stream))

    async def backlog(self) -> tuple[int, int]:
        """(queued, delivered and not yet acknowledged) messages of the consumer."""
        info = await self._subscription.consumer_info()
        return int(info.num_pending or 0), int(info.num_ack_pending or 0)

    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        """Up to `batch` deliveries; an empty list when none came within `timeout`.
        Other failures (NATS away) raise, for the caller to log and try again."""
        try:
            msgs = await self._subscription.fetch(batch, timeout=timeout)
        except TimeoutError:
            return []
        return [Delivery(msg) for msg in msgs]
