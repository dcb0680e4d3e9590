"""Acks that wait for the connection's next write (`tether.nats.acks`): sent with it, or
after `LINGER` when nothing else is written, and never lost on close."""

from __future__ import annotations

import asyncio
import time

from tether.nats.acks import LINGER, Acks


class Delivered:
    """A delivered message as far as `Acks` sees it: its subject and `ack()`."""

    subject = "tether.work.search"

    def __init__(self) -> None:
        self.acked_at: float | None = None

    async def ack(self) -> None:
        self.acked_at = time.monotonic()


async def _until(condition: object, deadline: float = 2.0) -> None:
    end = time.monotonic() + deadline
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, "not in time"
        await asyncio.sleep(0.001)


async def test_an_ack_goes_with_the_next_write() -> None:
    acks, msgs = Acks(), [Delivered(), Delivered()]
    for msg in msgs:
        acks.add(msg)  # type: ignore[arg-type]
    assert all(msg.acked_at is None for msg in msgs)
    await acks.send()
    assert all(msg.acked_at is not None for msg in msgs)


async def test_an_ack_with_no_write_to_go_with_is_sent_after_the_linger() -> None:
    acks, msg = Acks(), Delivered()
    added = time.monotonic()
    acks.add(msg)  # type: ignore[arg-type]
    await _until(lambda: msg.acked_at is not None)
    assert msg.acked_at is not None and msg.acked_at - added >= LINGER * 0.9


async def test_close_sends_what_waits() -> None:
    acks, msg = Acks(), Delivered()
    acks.add(msg)  # type: ignore[arg-type]
    await acks.close()
    assert msg.acked_at is not None


async def test_an_ack_that_fails_to_send_does_not_stop_the_others() -> None:
    class Away(Delivered):
        async def ack(self) -> None:
            raise ConnectionError("NATS away")

    acks, kept = Acks(), Delivered()
    acks.add(Away())  # type: ignore[arg-type]
    acks.add(kept)  # type: ignore[arg-type]
    await acks.send()
    assert kept.acked_at is not None
