"""The seam's error translation: what a nats-py failure means to Tether, and whether
trying again later may help (only a transport failure is `NatsUnavailableError`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import ParamSpec, TypeVar

import nats
from nats.aio.client import Client as NatsClient
from nats.js.errors import APIError

from tether.errors import (
    JetStreamError,
    NatsUnavailableError,
    NotProvisionedError,
    RevisionConflictError,
    TetherError,
)
from tether.nats import codes

_FAILURES: tuple[type[BaseException], ...] = (nats.errors.Error, OSError)
"""What nats-py raises when NATS is away or does not answer (TimeoutError is an OSError)."""
P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


class _Unanswered:
    """NATS calls of this process that went unanswered (see `disturbances`)."""

    count = 0


def disturbances(nc: NatsClient) -> int:
    """Reconnects of `nc` plus the NATS calls of this process that went unanswered: a
    change means JetStream may have failed over meanwhile, and may deliver again, as a
    first delivery, a message it had delivered already (a new leader can lack the
    consumer's last state). What this process believed from before it no longer holds."""
    return int(nc.stats["reconnects"]) + _Unanswered.count


def unavailable(exc: BaseException) -> NatsUnavailableError:
    _Unanswered.count += 1
    return NatsUnavailableError(
        f"NATS did not answer ({type(exc).__name__}: {exc or 'no detail'}): check that "
        "the server is up and reachable (--nats / TETHER_NATS_URL), then try again"
    )


def seam_error(exc: BaseException) -> TetherError:
    """Tether's error for a nats-py failure: only a transport failure (no connection, a
    timeout, no responders, JetStream not ready) is NatsUnavailableError; a lost
    compare-and-set is RevisionConflictError; any other JetStream refusal keeps its codes."""
    if isinstance(exc, APIError) and exc.code != codes.UNAVAILABLE:
        if exc.err_code in codes.LOST_COMPARE_AND_SET:
            return RevisionConflictError(description=exc.description or "")
        if exc.err_code is not None or exc.code is not None:
            return JetStreamError(exc.description or type(exc).__name__, exc.code, exc.err_code)
    return unavailable(exc)


_AWAY: tuple[type[BaseException], ...] = (
    nats.errors.NoServersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.UnexpectedEOF,
    nats.errors.FlushTimeoutError,
    nats.js.errors.NoStreamResponseError,  # a stream with no leader yet, at a start
    OSError,  # refused, unreachable, a name that does not resolve; TimeoutError, nats-py's too
)
_NOT_AWAY = (ssl.SSLError, FileNotFoundError, PermissionError, IsADirectoryError)


def away_for_now(exc: BaseException) -> bool:
    """Whether `exc` says only that NATS is away for now, so that trying again later may
    work: it was not reached (nothing listens yet, the name does not resolve yet), did
    not answer in time, or its JetStream was not ready (a cluster electing its leaders).

    Not a refusal of the credentials, a missing file, a TLS failure, a server without
    JetStream (no responders to its API), a missing installation or any other refusal:
    trying again cannot help those.
    """
    if isinstance(exc, NotProvisionedError):
        return False
    if isinstance(exc, NatsUnavailableError):
        return exc.__cause__ is not None and away_for_now(exc.__cause__)
    if isinstance(exc, APIError):
        return exc.code == codes.UNAVAILABLE
    return isinstance(exc, _AWAY) and not isinstance(exc, _NOT_AWAY)


@contextlib.contextmanager
def failures_translated() -> Iterator[None]:
    """Raise Tether's errors where nats-py raises its own (see `seam_error`), so no
    caller outside the seam needs to know nats-py's."""
    try:
        yield
    except TetherError:
        raise
    except _FAILURES as exc:
        raise seam_error(exc) from exc


def translated(call: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`call` behind `failures_translated`, without a context manager on the hot path."""

    @functools.wraps(call)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await call(*args, **kwargs)
        except TetherError:
            raise
        except _FAILURES as exc:
            raise seam_error(exc) from exc

    return wrapper


def translating(cls: C) -> C:
    """Apply `translated` to every public coroutine method of `cls`: the seam's boundary."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, translated(member))
        elif isinstance(member, classmethod) and inspect.iscoroutinefunction(member.__func__):
            setattr(cls, name, classmethod(translated(member.__func__)))
    return cls
