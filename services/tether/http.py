"""`HttpServer`: an ASGI app served by uvicorn inside a Tether process (the MCP gateway,
the dashboard), on a socket bound first so a taken port fails at start with a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from tether.errors import TetherError


def loopback(host: str) -> bool:
    """Whether `host` is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a `Host` header, without its port: `[::1]:80` is `::1`."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def is_address(name: str) -> bool:
    """An IP address, not a name: a page cannot rebind it (DNS rebinding needs a name)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


SHUTDOWN_GRACE = 2.0
"""Seconds open streams (SSE, long polls) get to finish when the server stops."""


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The process owns its signals (`tether gateway`, `tether dev`); uvicorn's own
        # handlers would replace them and re-raise them after shutdown.
        yield


class HttpServer:
    """`what` names the server in errors ("the MCP gateway"); they are raised as `error`."""

    def __init__(
        self, host: str, port: int, what: str, error: type[TetherError] = TetherError
    ) -> None:
        self.host = host
        self.port = port
        self._what = what
        self._error = error
        self._uvicorn: _Uvicorn | None = None
        self._serving: asyncio.Task[None] | None = None

    def url(self, path: str = "") -> str:
        """The server's URL; with port 0, the port the system chose."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    async def start(self, app: Any) -> None:
        sock = self._bind()
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(SHUTDOWN_GRACE),
            lifespan="on",
        )
        self._uvicorn = _Uvicorn(config)
        self._serving = asyncio.create_task(self._serve(self._uvicorn, sock))
        while not self._uvicorn.started:
            if self._serving.done():
                await self._serving
                raise self._error(f"{self._what} at {self.url()} stopped while starting")
            await asyncio.sleep(0.01)

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            return socket.create_server((self.host, self.port), family=family)
        except OSError as exc:
            raise self._error(
                f"{self._what} cannot listen on {self.host}:{self.port} ({exc.strerror}; "
                "is another process using the port?)"
            ) from exc

    async def _serve(self, server: _Uvicorn, sock: socket.socket) -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits when the app's startup fails
            raise self._error(f"{self._what} at {self.url()} failed to start") from exc
        finally:
            sock.close()

    async def stop(self) -> None:
        if self._uvicorn is not None and self._serving is not None:
            self._uvicorn.should_exit = True
            with contextlib.suppress(Exception):
                await self._serving
        self._uvicorn = self._serving = None
