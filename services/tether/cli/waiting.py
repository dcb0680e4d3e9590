"""A long-running role started while NATS is away waits for it instead of exiting."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tether.service import Service

log = logging.getLogger("tether.cli")

ABANDON_WITHIN = 10.0
"""Seconds a service of a failed start gets to stop (its running steps get their grace,
its connection is closed); one stuck on a NATS that does not answer is left."""


@dataclass(frozen=True)
class Waiting:
    """How a long-running role waits for NATS at start."""

    url: str
    """Where NATS is (passwords blanked), for the lines logged while waiting."""
    again: Callable[[], Sequence[Service]]
    """Fresh services like the first ones, for each new try: a failed start leaves its
    own unfit to start again."""
    first_delay: float = 0.5
    """Seconds before the second try; each later one waits twice as long..."""
    max_delay: float = 5.0
    """... up to this."""
    say_every: float = 60.0
    """Seconds between the lines saying it still waits."""


def delay(waiting: Waiting, tries: int, rng: random.Random) -> float:
    """Seconds to wait after `tries` failed tries: doubling from `first_delay` up to
    `max_delay`, less a random part of up to a half, so that a fleet started together
    does not try in step."""
    top = min(waiting.max_delay, waiting.first_delay * 2.0 ** min(tries - 1, 30))
    return top * (1.0 - rng.random() / 2)


async def start_waiting(
    services: Sequence[Service], waiting: Waiting, stopping: asyncio.Event
) -> list[Service]:
    """Start `services` in order; while a start fails only because NATS is away
    (`away_for_now`), say so, wait and try again with fresh ones (`waiting.again`).

    A worker or dispatcher may well start before NATS answers: a host booting, a server
    restarting, a cluster still electing its leaders. Exiting would hand that to its
    supervisor, which may have given up by the time NATS is back. A refusal (the
    credentials, no installation, ...) is raised at once, as every failure is by the
    commands that do not wait (`tether dev`, the one-shot commands).

    Returns the started services, or none once `stopping` is set (nothing runs then).
    """
    from tether.nats.failures import away_for_now  # NATS's own, loaded only to serve

    patience = _Patience(waiting)
    while True:
        try:
            started = await _start(services, stopping)
        except Exception as exc:
            if not away_for_now(exc):
                raise
            if await _set_within(stopping, patience.failed(exc)):
                return []
            services = waiting.again()
            continue
        if started is None:
            return []
        patience.answered()
        return started


class _Patience:
    """Counts the tries, and says when waiting starts, once a minute after, and when it
    ends."""

    def __init__(self, waiting: Waiting) -> None:
        self.waiting = waiting
        self.tries = 0
        self.since = time.monotonic()
        self.said_at = 0.0
        self.rng = random.Random()

    def failed(self, exc: Exception) -> float:
        """Note a failed try; the seconds to wait before the next."""
        self.tries += 1
        now = time.monotonic()
        if self.tries == 1:
            log.warning(
                "waiting for NATS at %s: %s. Trying again until it answers "
                "(SIGTERM or Ctrl-C stops this)",
                self.waiting.url,
                _one_line(exc),
            )
            self.said_at = now
        elif now - self.said_at >= self.waiting.say_every:
            log.warning(
                "still waiting for NATS at %s, for %.0f s (%d tries): %s",
                self.waiting.url,
                now - self.since,
                self.tries,
                _one_line(exc),
            )
            self.said_at = now
        return delay(self.waiting, self.tries, self.rng)

    def answered(self) -> None:
        if self.tries:
            log.info(
                "NATS at %s answered at try %d, after %.0f s: started",
                self.waiting.url,
                self.tries + 1,
                time.monotonic() - self.since,
            )


async def _start(services: Sequence[Service], stopping: asyncio.Event) -> list[Service] | None:
    """Start every service in order; None if `stopping` is set first. A start that fails
    or is cut short leaves nothing running: the services it started are stopped, and so
    is the one whose start failed, which may hold a connection already."""
    started: list[Service] = []
    for service in services:
        try:
            done = await _unless_set(service.start(), stopping)
        except Exception:
            await _abandon([*started, service])
            raise
        if not done:
            await _abandon([*started, service])
            return None
        started.append(service)
    return started


async def _unless_set(call: Awaitable[None], event: asyncio.Event) -> bool:
    """Await `call`; False, with `call` cancelled, if `event` is set first."""
    task = asyncio.ensure_future(call)
    setting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({task, setting}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        setting.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task  # how a start cut short ends does not matter: it is abandoned
    return False


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` is set within `seconds`."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


async def _abandon(services: Sequence[Service]) -> None:
    """Stop services of a failed start, last first, each hurried (no drain: it had
    hardly begun) and within ABANDON_WITHIN; one that fails to (NATS is away, after
    all) is only noted."""
    for service in reversed(services):
        service.hurry()
        try:
            await asyncio.wait_for(service.stop(), ABANDON_WITHIN)
        except Exception as exc:
            log.debug("stopping the %s of a failed start: %r", type(service).__name__, exc)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
