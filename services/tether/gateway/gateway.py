"""`Gateway`: the MCP server over Streamable HTTP, run by uvicorn inside the process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

from tether.client import Client
from tether.errors import TetherError
from tether.gateway.backend import GatewayOptions, TaskBackend
from tether.gateway.calls import ToolCalls
from tether.gateway.methods import TaskMethods
from tether.gateway.notifications import LegacyPush, StatusFeed, TaskListen
from tether.gateway.server import build_server
from tether.nats.connection import NatsConfig
from tether.nats.provision import Layout
from tether.service import Service

if TYPE_CHECKING:
    from tether.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765
SHUTDOWN_GRACE = 2.0
"""Seconds open streams (SSE, long polls) get to finish when the gateway stops."""


class GatewayError(TetherError):
    """The gateway could not start (for example its port is taken)."""


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The process owns its signals (`tether gateway`, `tether dev`); uvicorn's own
        # handlers would replace them and re-raise them after shutdown.
        yield


class Gateway(Service):
    """Serves MCP at `http://HOST:PORT/mcp` for the Tether installation behind `nats`.

    Holds no task state: every answer comes from the task records, so any number of
    gateways serve the same tasks and a restart loses nothing.

    ```python
    async with Gateway(NatsConfig(url="nats://localhost:4222"), port=8765) as gateway:
        print(gateway.url)
    ```
    """

    def __init__(
        self,
        nats: NatsConfig | None = None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        options: GatewayOptions | None = None,
        layout: Layout | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.nats = nats or NatsConfig()
        self.metrics = metrics
        self.host = host
        self.port = port
        self.options = options or GatewayOptions()
        self._client = Client(self.nats, layout=layout)
        backend = TaskBackend(self._client, self.options)
        self._feed = StatusFeed(backend)
        self._push = LegacyPush(self._feed, backend)
        self._listen = TaskListen(self._feed, backend)
        calls = ToolCalls(backend, self._push)
        self._server = build_server(calls, TaskMethods(backend, self._push), self._listen)
        self._uvicorn: _Uvicorn | None = None
        self._serving: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint; with port 0, the port the system chose."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.options.path}"

    def parts(self) -> list[Service]:
        return [self._client]

    async def start(self) -> None:
        await self._client.connect()
        if self.metrics is not None:
            self.metrics.attach(self._client.store)
        try:
            await self._feed.start()
            await self._start_http()
        except BaseException:
            await self.stop()
            raise
        log.info("MCP gateway serving %s", self.url)

    async def _start_http(self) -> None:
        sock = self._bind()
        self.port = sock.getsockname()[1]
        app = self._server.streamable_http_app(
            streamable_http_path=self.options.path, host=self.host
        )
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
                raise GatewayError(f"the MCP gateway at {self.url} stopped while starting")
            await asyncio.sleep(0.01)

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            return socket.create_server((self.host, self.port), family=family)
        except OSError as exc:
            raise GatewayError(
                f"the MCP gateway cannot listen on {self.host}:{self.port} ({exc.strerror}; "
                "is another process using the port?)"
            ) from exc

    async def _serve(self, server: _Uvicorn, sock: socket.socket) -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits when the app's startup fails
            raise GatewayError(f"the MCP gateway at {self.url} failed to start") from exc
        finally:
            sock.close()

    async def stop(self) -> None:
        self._listen.close()
        if self._uvicorn is not None and self._serving is not None:
            self._uvicorn.should_exit = True
            with contextlib.suppress(Exception):
                await self._serving
        self._uvicorn = self._serving = None
        await self._push.stop()
        await self._feed.stop()
        await self._client.close()
