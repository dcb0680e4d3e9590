"""Whether a worker is alive, from NATS itself: each worker serves a subject of its own
(`Names.alive_subject`, core NATS), and the server answers a request there with "no
responders" at once when no connection serves it, that is, once the worker's connection
is gone (its process died, or the server dropped it).

A "no responders" is believed only from a connection that is up and stayed up while it
asked (`steadiness`: no reconnect, no unanswered NATS call of this process, no change in
the cluster meanwhile). A live worker's subscription is missing for a moment wherever the
server does not know of it: while its connection is re-made (its server died, or dropped
it), and while a server that just came back, or whose route to another just broke,
learns the other servers' subscribers again. The server tells every client of such a
change (an INFO with the cluster's addresses), so the asker can count them. Whoever acts
on "no responders" asks again over a span longer than a reconnect
(`tether.worker.succession`).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from tether.errors import NotAllowedError
from tether.nats.connection import Refused, unless_refused
from tether.nats.failures import disturbances

log = logging.getLogger("tether.nats")
SELF_CHECK_S = 2.0
"""How long a worker waits for its own answer when it starts serving its subject."""


_changes: weakref.WeakKeyDictionary[NatsClient, list[int]] = weakref.WeakKeyDictionary()
"""For each connection watched, how many times its server said the cluster changed."""


def steadiness(nc: NatsClient) -> int:
    """A count that changes whenever a "no responders" on `nc` may not be the truth: a
    reconnect, an unanswered NATS call of this process (`disturbances`), or a change in
    the cluster its server told of. Counted from the first call for `nc` on."""
    return disturbances(nc) + _watch_cluster(nc)[0]


def _watch_cluster(nc: NatsClient) -> list[int]:
    """Count the INFO messages the server sends once connected: it does when a server
    joins or leaves the cluster (a route made or lost), or is shutting down."""
    counted = _changes.get(nc)
    if counted is None:
        counted = _changes[nc] = [0]
        told = nc._process_info

        async def process_info(info: dict[str, Any], initial_connection: bool = False) -> None:
            if not initial_connection:
                counted[0] += 1
            await told(info, initial_connection=initial_connection)

        setattr(nc, "_process_info", process_info)  # noqa: B010  # nats-py has no callback
    return counted


class Asked(str, Enum):
    """What one question to a worker said."""

    ALIVE = "alive"
    """It answered: alive, however late its beats."""
    GONE = "gone"
    """The server said no connection serves its subject: its connection is gone."""
    UNSURE = "unsure"
    """No answer in time, or this connection was not steady meanwhile: ask again later."""


async def ask_alive(nc: NatsClient, subject: str, timeout: float) -> Asked:
    """Ask the worker that serves `subject` whether it is alive (`timeout` in seconds)."""
    if not nc.is_connected:
        return Asked.UNSURE
    before = steadiness(nc)
    try:
        await nc.request(subject, b"", timeout=timeout)
    except NoRespondersError:
        steady = nc.is_connected and steadiness(nc) == before
        return Asked.GONE if steady else Asked.UNSURE
    except Exception as exc:  # a timeout, a refusal, NATS away: nothing learnt
        log.debug("no answer on %s: %s", subject, exc or type(exc).__name__)
        return Asked.UNSURE
    return Asked.ALIVE


async def serve_alive(
    nc: NatsClient, subject: str, answers: Callable[[], bool] = lambda: True
) -> Callable[[], Awaitable[None]]:
    """Answer every question on `subject` (an empty reply) while `answers()`, until the
    connection closes or the returned stop is awaited; the server has the subscription
    when this returns."""

    async def answer(msg: Msg) -> None:
        if msg.reply and answers():
            with contextlib.suppress(Exception):  # the asker will ask again
                await nc.publish(msg.reply)

    subscription = await nc.subscribe(subject, cb=answer)
    await nc.flush()

    async def stop() -> None:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()

    return stop


async def check_answered(nc: NatsClient, subject: str) -> None:
    """Ask `subject` (a worker's own, answered by `serve_alive`) once, from
    `nc`: a user that may ask but not serve would be taken for dead by every other
    worker, so that is an error (NotAllowedError); one that may neither is judged by its
    beats alone (a warning)."""
    _watch_cluster(nc)
    try:
        asked = await unless_refused(nc, ask_alive(nc, subject, SELF_CHECK_S), subject)
    except Refused as exc:
        if "subscription" in str(exc).lower():
            raise _not_served(subject, str(exc)) from None
        log.warning(
            "this worker may not ask %s (%s): other workers judge it by its beats alone; "
            "grant its user publish and subscribe on it (deploy/nats/roles.conf)",
            subject,
            exc,
        )
        asked = Asked.UNSURE
    if asked is Asked.GONE:
        raise _not_served(subject, "no responders to its own subscription")
    if asked is Asked.UNSURE:
        log.warning(
            "this worker's own answer on %s did not come back: it is judged by its beats "
            "alone where it cannot be asked (deploy/nats/roles.conf: allow_responses)",
            subject,
        )


def _not_served(subject: str, why: str) -> NotAllowedError:
    return NotAllowedError(
        subject,
        f"{why}: other workers would take this one for dead at once; grant the worker's "
        "user subscribe on <prefix>.worker.*.alive beside publish (deploy/nats/roles.conf)",
    )
