"""`Gateway`: the MCP server over Streamable HTTP, run by uvicorn inside the process."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.client import Client
from tether.errors import TetherError
from tether.gateway.backend import GatewayOptions, TaskBackend
from tether.gateway.callers import BearerAuth
from tether.gateway.callers import seal_key as sealing_key
from tether.gateway.calls import ToolCalls
from tether.gateway.methods import TaskMethods
from tether.gateway.notifications import LegacyPush, StatusFeed, TaskListen
from tether.gateway.server import build_server
from tether.http import HttpServer
from tether.nats.connection import NatsConfig
from tether.nats.layout import Layout
from tether.service import Service

if TYPE_CHECKING:
    from tether.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765


class GatewayError(TetherError):
    """The gateway could not start (for example its port is taken)."""


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
        tokens: Mapping[str, str] | None = None,
        seal_key: str | None = None,
    ) -> None:
        """`tokens` (token -> caller name): require one as a bearer token, and bind each
        MCP task to the caller that created it, sealed with `seal_key` (the same on every
        replica; see `tether.gateway.callers.seal_key`)."""
        self.nats = nats or NatsConfig()
        self.tokens = dict(tokens or {})
        self.metrics = metrics
        self._http = HttpServer(host, port, "the MCP gateway", GatewayError)
        self.options = options or GatewayOptions()
        self._client = Client(self.nats, layout=layout, act_through_api=True)
        backend = TaskBackend(self._client, self.options, sealing_key(self.tokens, seal_key))
        self._feed = StatusFeed(backend)
        self._push = LegacyPush(self._feed, backend)
        self._listen = TaskListen(self._feed, backend)
        calls = ToolCalls(backend, self._push)
        self._server = build_server(calls, TaskMethods(backend, self._push), self._listen)

    @property
    def host(self) -> str:
        return self._http.host

    @property
    def port(self) -> int:
        """The port; with port 0, the one the system chose once started."""
        return self._http.port

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return self._http.url(self.options.path)

    def parts(self) -> list[Service]:
        return [self._client]

    async def start(self) -> None:
        await self._client.connect()
        if self.metrics is not None:
            self._client.count_into(self.metrics)
        try:
            await self._feed.start()
            await self._start_http()
        except BaseException:
            await self.stop()
            raise
        log.info("MCP gateway serving %s", self.url)

    async def _start_http(self) -> None:
        app: Any = self._server.streamable_http_app(
            streamable_http_path=self.options.path, host=self.host
        )
        if self.tokens:
            app = BearerAuth(app, self.tokens)
        await self._http.start(app)

    async def stop(self) -> None:
        self._listen.close()
        await self._http.stop()
        await self._push.stop()
        await self._feed.stop()
        await self._client.close()
