"""One embedded nats-server per data directory, shared by every script run there.

The first script that needs it starts it (and stops it when done); a second one running
meanwhile connects to the same server, since two servers on one store lose data. The
server dies with the process that started it, so a script whose server went away (its
owner finished or was killed) starts it again on the same port and data: its
connections, which reconnect without end, find it back. A lock file makes "is one
running? else start one" a single step among scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from tether.nats.embedded import live_holder, logged_port
from tether.nats.server import NatsServer, NatsServerError

log = logging.getLogger("tether.local")

LOCK_FILE = "local.lock"
WATCH_EVERY = 0.25
"""Seconds between looks at whether the shared server still runs."""
REACH_WITHIN = 20.0
"""Seconds to wait for a server that holds the store (starting, or stopping) to listen
or to end."""


class SharedServer:
    """The nats-server of `data_dir` (`data_dir/nats`, as `tether dev` keeps it):
    `open()` started here or found running, `close()` stopped if started here. Either
    way it takes the data dir's token (`token`), which no other local user can read."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.store_dir = self.data_dir / "nats"
        self.port = -1
        self.token = ""
        self._own: NatsServer | None = None
        self._watching: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def started_here(self) -> bool:
        return self._own is not None

    async def open(self) -> str:
        """Start the server, or join the one running; returns its URL."""
        deadline = time.monotonic() + REACH_WITHIN
        while (port := self._claim()) is None:
            if time.monotonic() > deadline:
                holder = live_holder(self._probe.pid_file)
                raise NatsServerError(
                    f"{self.store_dir} is held by nats-server PID {holder}, which does not "
                    f"listen: stop it with 'kill {holder}', or pass another data_dir"
                )
            await asyncio.sleep(0.1)
        self.port = port
        self._watching = asyncio.create_task(self._watch())
        return self.url

    async def close(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watching
        own, self._own = self._own, None
        if own is not None:
            await asyncio.to_thread(own.stop)

    @property
    def _probe(self) -> NatsServer:
        """The store's files (PID file, log), whoever runs the server."""
        return NatsServer(self.store_dir)

    def _claim(self) -> int | None:
        """Under the lock: the port of the live server holding the store, or of one
        started here (on `port`, the same as before, -1 the first time). None while the
        holder does not listen (starting, or ending with the script that started it).

        Called on the event loop's thread, not in a worker thread: the server is told to
        end when the thread that started it ends (`PR_SET_PDEATHSIG` is per thread)."""
        server = NatsServer.embedded(self.data_dir, port=self.port)  # the data dir made private
        self.token = server.token or ""
        with _locked(self.data_dir / LOCK_FILE):
            probe = self._probe
            if live_holder(probe.pid_file) is None:
                self._own = server.start()
                return server.port
            port = logged_port(probe.log_file)
            return port if port is not None and _listens(port) else None

    async def _watch(self) -> None:
        """Start the server again if it ended under this script (see the module)."""
        while True:
            await asyncio.sleep(WATCH_EVERY)
            own = self._own
            if own is not None and own.running:
                continue
            if own is None and live_holder(self._probe.pid_file) is not None:
                continue
            if own is not None:
                log.warning("the nats-server (log %s) ended: starting it again", own.log_file)
                own.stop()  # reaped, its PID file gone
                self._own = None
            try:
                self._claim()
            except NatsServerError as exc:  # the next look tries again
                log.warning("could not start the embedded nats-server again: %s", exc)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`, which the kernel drops if this process dies."""
    with path.open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def _listens(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False
