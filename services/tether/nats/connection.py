"""Connecting to NATS: one frozen config, one function."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import ssl
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import nats
from nats.aio.client import Client as NatsClient

from tether.errors import NatsUnavailableError, TetherError
from tether.schemas.names import DEFAULT_NAMES, Names

DEFAULT_URL = "nats://127.0.0.1:4222"
_FAILURES: tuple[type[BaseException], ...] = (nats.errors.Error, OSError)
"""What nats-py raises when NATS is away or does not answer (TimeoutError is an OSError)."""
Connection = NatsClient
"""A connection to NATS, as `connect` returns it."""
log = logging.getLogger("tether.nats")
P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)
_closing: weakref.WeakSet[NatsClient] = weakref.WeakSet()


@dataclass(frozen=True)
class NatsConfig:
    """How to reach NATS. Build it once at the edge (CLI, test, app) and pass it in."""

    url: str = DEFAULT_URL
    """One URL or a comma-separated list of cluster seeds; may carry user:password@."""
    credentials: str | None = None
    """Path to a `.creds` file (NATS decentralized auth)."""
    token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    name: str = "tether"
    """Client name shown in the server's connection list."""
    connect_timeout: float = 5.0
    names: Names = field(default_factory=lambda: DEFAULT_NAMES)
    """Prefix of every subject, stream and bucket."""
    replicas: int = 1
    """Replicas of Tether's streams and buckets when it creates them (3 on a cluster)."""

    @property
    def servers(self) -> list[str]:
        return [part.strip() for part in self.url.split(",") if part.strip()]

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context


async def connect(config: NatsConfig, on_lost: Callable[[str], None] | None = None) -> NatsClient:
    """Connect, then keep reconnecting for ever: a NATS restart must not kill a worker.

    nats-py does give up on a connection for good in some cases (a protocol error
    from the server, such as an oversized message); `on_lost` hears of that, so the
    owner can stop instead of living on without NATS. Close with `close`.
    """

    async def closed() -> None:
        if nc in _closing or on_lost is None:
            return
        reason = f"the NATS connection to {config.url} closed for good ({nc.last_error})"
        log.error("%s", reason)
        on_lost(reason)

    try:
        nc = await nats.connect(
            servers=config.servers,
            name=config.name,
            user_credentials=config.credentials,
            token=config.token,
            tls=config.tls_context(),
            connect_timeout=config.connect_timeout,
            allow_reconnect=True,
            # A few tries at first so a wrong URL fails fast; nats-py has no separate
            # option for the initial connect, so the limit is lifted once connected.
            max_reconnect_attempts=3,
            reconnect_time_wait=0.25,
            error_cb=_quiet,
            disconnected_cb=_noop,
            reconnected_cb=_noop,
            closed_cb=closed,
        )
    except (OSError, nats.errors.Error, TimeoutError) as exc:
        raise NatsUnavailableError(
            f"cannot reach NATS at {config.url} ({exc or type(exc).__name__}): "
            "start a server ('tether dev') or pass its URL with --nats / TETHER_NATS_URL"
        ) from exc
    nc.options["max_reconnect_attempts"] = -1
    return nc


async def close(nc: NatsClient) -> None:
    """Close a connection on purpose (its `on_lost` stays silent); never raises."""
    _closing.add(nc)
    try:
        await nc.close()
    except Exception as exc:
        log.debug("closing the NATS connection: %s", exc)


async def _quiet(exc: Exception) -> None:
    """nats-py reports reconnect noise through this callback; the client recovers by itself."""


async def _noop() -> None:
    pass


def unavailable(exc: BaseException) -> NatsUnavailableError:
    return NatsUnavailableError(
        f"NATS did not answer ({type(exc).__name__}: {exc or 'no detail'}): check that "
        "the server is up and reachable (--nats / TETHER_NATS_URL), then try again"
    )


@contextlib.contextmanager
def failures_translated() -> Iterator[None]:
    """Raise NatsUnavailableError where nats-py raises its own errors, so no caller
    outside the seam needs to know nats-py's."""
    try:
        yield
    except TetherError:
        raise
    except _FAILURES as exc:
        raise unavailable(exc) from exc


def translated(call: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`call` behind `failures_translated`, without a context manager on the hot path."""

    @functools.wraps(call)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await call(*args, **kwargs)
        except TetherError:
            raise
        except _FAILURES as exc:
            raise unavailable(exc) from exc

    return wrapper


def translating(cls: C) -> C:
    """Apply `translated` to every public coroutine method of `cls`: the seam's boundary."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, translated(member))
        elif isinstance(member, classmethod) and inspect.iscoroutinefunction(member.__func__):
            setattr(cls, name, classmethod(translated(member.__func__)))
    return cls
