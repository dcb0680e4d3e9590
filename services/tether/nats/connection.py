"""Connecting to NATS: one frozen config, one function."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, JetStreamManager
from nats.js.api import ConsumerConfig, ConsumerInfo
from nats.nuid import NUID

from tether.errors import (
    NatsUnavailableError,
)
from tether.nats.embedded import token_for
from tether.schemas.names import DEFAULT_NAMES, Names

DEFAULT_URL = "nats://127.0.0.1:4222"
Connection = NatsClient
"""A connection to NATS, as `connect` returns it."""
log = logging.getLogger("tether.nats")
R = TypeVar("R")
_closing: weakref.WeakSet[NatsClient] = weakref.WeakSet()
PERMISSIONS_VIOLATION = "permissions violation"
"""How nats-py words (lower-cased) the server's refusal of a publish or subscribe."""
RECONNECT_LOOK = 0.05
"""Seconds between looks for a reconnect (`sleep_unless_reconnected`)."""


def _not_eof_noise(record: logging.LogRecord) -> bool:
    """asyncio warns "returning true from eof_received() has no effect when using ssl" at
    every close of nats-py's TLS connection: harmless, and not for users to read."""
    return not record.getMessage().startswith("returning true from eof_received()")


logging.getLogger("asyncio").addFilter(_not_eof_noise)
CONNECT_BOUND = 2.0
"""The first connect gives up after this many connect timeouts, however it is stuck."""


class Refusals:
    """The permission violations the server reports on one connection.

    nats-py hands them only to the error callback: a refused request just goes
    unanswered until it times out. Whoever would rather know at once waits on `next`.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[str, asyncio.Future[str]]] = []

    def next(self, about: str = "") -> asyncio.Future[str]:
        """The server's words for the next refusal that mentions `about` (a subject or
        its start, any case); cancel the future when no longer interested."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting = [(a, f) for a, f in self._waiting if not f.done()]
        self._waiting.append((about.lower(), future))
        return future

    def report(self, text: str) -> None:
        waiting, self._waiting = self._waiting, []
        for about, future in waiting:
            if future.done():
                continue
            if about in text.lower():
                future.set_result(text)
            else:
                self._waiting.append((about, future))


_refusals: weakref.WeakKeyDictionary[NatsClient, Refusals] = weakref.WeakKeyDictionary()


def refusals(nc: NatsClient) -> Refusals | None:
    """The refusals of a connection made by `connect` (None for any other)."""
    return _refusals.get(nc)


class Refused(Exception):
    """The server refused this connection a publish (a permissions violation)."""


async def unless_refused(nc: NatsClient, call: Awaitable[R], about: str) -> R:
    """`call`, or Refused as soon as the server refuses this connection a publish that
    mentions `about` (a subject or its start): nats-py would wait out the timeout."""
    watching = refusals(nc)
    refusal = watching.next(about) if watching is not None else None
    task = asyncio.ensure_future(call)
    try:
        if refusal is not None:
            either: set[asyncio.Future[Any]] = {task, refusal}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                raise Refused(refusal.result())
        return await task
    finally:
        task.cancel()
        if refusal is not None:
            refusal.cancel()


_SUBJECT_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class NatsConfig:
    """How to reach NATS. Build it once at the edge (CLI, test, app) and pass it in."""

    url: str = DEFAULT_URL
    """One URL or a comma-separated list of cluster seeds; may carry user:password@."""
    credentials: str | None = None
    """Path to a `.creds` file (NATS decentralized auth: a user JWT and its nkey seed)."""
    nkey_seed: str | None = None
    """Path to a file holding an nkey seed (`SU...`), for a server that lists nkey users."""
    token: str | None = None
    embedded_dir: str | None = ".tether"
    """The data dir of an embedded nats-server (`tether dev`, `tether.run`; relative to
    the working directory): when `url` names the server running from there, and no
    other credentials are given, this process connects with its token. None: never."""
    tls_ca: str | None = None
    """CA bundle to verify the server's certificate with (and to turn TLS on)."""
    tls_cert: str | None = None
    """Client certificate, for a server that verifies clients (`verify: true`)."""
    tls_key: str | None = None
    name: str = "tether"
    """Client name shown in the server's connection list."""
    connect_timeout: float = 5.0
    names: Names = field(default_factory=lambda: DEFAULT_NAMES)
    """Prefix of every subject, stream and bucket."""
    replicas: int = 1
    """Replicas of Tether's streams and buckets when it creates them (3 on a cluster)."""
    inbox_prefix: str | None = None
    """Where this connection takes its replies. None: `_INBOX_<user>` for a URL with
    user:password@ (so `deploy/nats/roles.conf`, which lets each user read only its own
    replies, works as it is), else `_INBOX`."""

    @property
    def safe_url(self) -> str:
        """The URL with any password or token in it blanked, for messages and logs."""
        return ",".join(_redacted(server) for server in self.url.split(","))

    @property
    def replies(self) -> str:
        """The inbox prefix in use (see `inbox_prefix`)."""
        if self.inbox_prefix:
            return self.inbox_prefix
        first = urlsplit(self.servers[0]) if self.servers else None
        user = first.username if first is not None and first.password is not None else None
        return f"_INBOX_{user}" if user and _SUBJECT_TOKEN.fullmatch(user) else "_INBOX"

    @property
    def servers(self) -> list[str]:
        return [part.strip() for part in self.url.split(",") if part.strip()]

    def check_files(self) -> None:
        """Raise NatsUnavailableError naming a credentials or TLS file that is not there
        (nats-py would report a missing file as an unreachable server)."""
        for what, path in (
            ("credentials file", self.credentials),
            ("nkey seed file", self.nkey_seed),
            ("TLS CA file", self.tls_ca),
            ("TLS certificate", self.tls_cert),
            ("TLS key", self.tls_key),
        ):
            if path is not None and not os.path.isfile(path):
                raise NatsUnavailableError(f"the {what} {path!r} does not exist")

    def with_embedded_token(self) -> NatsConfig:
        """This config, with the token of the embedded server its URL names (see
        `embedded_dir`); unchanged for any other server."""
        if self.embedded_dir is None or self.token or self.credentials or self.nkey_seed:
            return self
        token = token_for(self.url, Path(self.embedded_dir))
        return self if token is None else dataclasses.replace(self, token=token)

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context


class _NamedConsumers(JetStreamManager):
    """Gives every consumer created without a name a fresh one, so that its create
    request goes to `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, which permissions
    can pin to the subjects a role may read (nats-py's ordered consumers and KV watches
    use the unfiltered `$JS.API.CONSUMER.CREATE.<stream>`, which takes any config)."""

    _names = NUID()

    async def add_consumer(
        self,
        stream: str,
        config: ConsumerConfig | None = None,
        timeout: float | None = None,
        **params: object,
    ) -> ConsumerInfo:
        config = (config or ConsumerConfig()).evolve(**params)
        if not (config.name or config.durable_name):
            # a copy: an ordered consumer recreates itself from the same config
            config = dataclasses.replace(config, name=self._names.next().decode())
        return await super().add_consumer(stream, config, timeout)


class _JetStreamContext(JetStreamContext):
    @property
    def _jsm(self) -> JetStreamManager:
        return _NamedConsumers(conn=self._nc, prefix=self._prefix, timeout=self._timeout)


def jetstream_context(nc: NatsClient) -> JetStreamContext:
    """The JetStream context every Tether process uses (see `_NamedConsumers`)."""
    return _JetStreamContext(nc)


async def connect(config: NatsConfig, on_lost: Callable[[str], None] | None = None) -> NatsClient:
    """Connect, then keep reconnecting for ever: a NATS restart must not kill a worker.

    nats-py does give up on a connection for good in some cases (a protocol error
    from the server, such as an oversized message); `on_lost` hears of that, so the
    owner can stop instead of living on without NATS. Close with `close`.
    """

    async def closed() -> None:
        if nc in _closing or on_lost is None:
            return
        reason = f"the NATS connection to {config.safe_url} closed for good ({nc.last_error})"
        log.error("%s", reason)
        on_lost(reason)

    config.check_files()
    config = config.with_embedded_token()
    failures: list[Exception] = []

    async def errors(exc: Exception) -> None:
        if _refused(exc):
            failures.append(exc)  # nats-py then says only "no servers available"
        elif PERMISSIONS_VIOLATION in str(exc).lower():
            log.warning("NATS refused this user: %s", str(exc).removeprefix("nats: "))
            denied.report(str(exc))

    nc = NatsClient()
    denied = _refusals[nc] = Refusals()
    bound = CONNECT_BOUND * config.connect_timeout
    try:
        # nats-py can wait for ever on a TLS handshake that fails (a tls:// server and no
        # CA to verify it): the whole connect is bounded, not only each attempt.
        await asyncio.wait_for(_connect(nc, config, errors, closed), bound)
    except TimeoutError as exc:
        with contextlib.suppress(Exception):
            await nc.close()
        hint = "" if config.tls_ca else "; a server that requires TLS needs --tls-ca (and "
        hint += "" if config.tls_ca else "--tls-cert/--tls-key if it verifies clients)"
        raise NatsUnavailableError(
            f"cannot reach NATS at {config.safe_url} (no answer within {bound:.0f}s{hint})"
        ) from exc
    except (OSError, nats.errors.Error) as exc:
        if failures or _refused(exc):
            why = failures[-1] if failures else exc
            raise NatsUnavailableError(
                f"NATS at {config.safe_url} refused the credentials ({why}): pass --creds "
                "FILE, --nkey FILE, or user:password@ / token@ in the URL (TETHER_NATS_CREDS, ...)"
            ) from why  # the refusal, not "no servers": see `away_for_now`
        raise NatsUnavailableError(
            f"cannot reach NATS at {config.safe_url} ({exc or type(exc).__name__}): "
            "start a server ('tether dev') or pass its URL with --nats / TETHER_NATS_URL"
        ) from exc
    nc.options["max_reconnect_attempts"] = -1
    return nc


async def _connect(
    nc: NatsClient,
    config: NatsConfig,
    errors: Callable[[Exception], Awaitable[None]],
    closed: Callable[[], Awaitable[None]],
) -> None:
    await nc.connect(
        servers=config.servers,
        name=config.name,
        user_credentials=config.credentials,
        nkeys_seed=config.nkey_seed,
        token=config.token,
        tls=config.tls_context(),
        connect_timeout=config.connect_timeout,  # type: ignore[arg-type]  # floats work
        inbox_prefix=config.replies,
        allow_reconnect=True,
        # A few tries at first so a wrong URL fails fast; nats-py has no separate
        # option for the initial connect, so the limit is lifted once connected.
        max_reconnect_attempts=3,
        reconnect_time_wait=0.25,  # type: ignore[arg-type]
        error_cb=errors,
        disconnected_cb=_noop,
        reconnected_cb=_noop,
        closed_cb=closed,
    )


async def sleep_unless_reconnected(nc: NatsClient, seconds: float) -> None:
    """Sleep `seconds`, or until `nc` connects again (its subscriptions are back then,
    before anything sent since: nats-py sends them first)."""
    since, made = time.monotonic(), nc.stats["reconnects"]
    while (left := seconds - (time.monotonic() - since)) > 0:
        await asyncio.sleep(min(left, RECONNECT_LOOK))
        if nc.stats["reconnects"] != made:
            return


async def close(nc: NatsClient) -> None:
    """Close a connection on purpose (its `on_lost` stays silent); never raises."""
    _closing.add(nc)
    try:
        await nc.close()
    except Exception as exc:
        log.debug("closing the NATS connection: %s", exc)


def _refused(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "authorization" in text or "authentication" in text


def _redacted(server: str) -> str:
    """`nats://alice:***@host` for `nats://alice:pw@host`, `nats://***@host` for a token."""
    parts = urlsplit(server.strip())
    if "@" not in parts.netloc:
        return server.strip()
    user, _, host = parts.netloc.rpartition("@")
    shown = f"{user.split(':', 1)[0]}:***" if ":" in user else "***"
    return urlunsplit(parts._replace(netloc=f"{shown}@{host}"))


async def _noop() -> None:
    pass
