"""`Dashboard`: the web UI over a Tether installation, served inside the process."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Collection

from tether.client import Client
from tether.errors import TetherError
from tether.http import HttpServer, loopback
from tether.nats.connection import NatsConfig
from tether.service import Service
from tether.ui.app import build_app

log = logging.getLogger(__name__)

DEFAULT_PORT = 8233


class DashboardError(TetherError):
    """The dashboard could not start (for example its port is taken)."""


class Dashboard(Service):
    """Serves the dashboard at `http://HOST:PORT/`. Holds no state of its own: any number
    of dashboards show the same tasks, and every page is read from NATS when asked.

    ```python
    async with Dashboard(NatsConfig(url="nats://localhost:4222"), port=0) as ui:
        print(ui.url)
    ```
    """

    def __init__(
        self,
        nats: NatsConfig | None = None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        token: str | None = None,
        allowed_hosts: Collection[str] = (),
    ) -> None:
        self.nats = nats or NatsConfig()
        self.token = token or (None if loopback(host) else secrets.token_urlsafe(24))
        """Required of every request; an empty one counts as none, and one is generated
        for an address other than loopback (see `url`)."""
        self.allowed_hosts = tuple(allowed_hosts)
        self.csrf = secrets.token_urlsafe(24)
        """The anti-forgery token in every form this dashboard serves."""
        self._client = Client(self.nats, act_through_api=True)  # its user may not write tasks
        self._http = HttpServer(host, port, "the dashboard", DashboardError)
        self._closing = asyncio.Event()

    @property
    def url(self) -> str:
        """The address to open: with a token, one that carries it (once, into a cookie)."""
        return self._http.url("/" + (f"?token={self.token}" if self.token else ""))

    @property
    def port(self) -> int:
        return self._http.port

    def parts(self) -> list[Service]:
        return [self._client]

    async def start(self) -> None:
        await self._client.connect()
        try:
            app = build_app(
                self._client,
                self._closing,
                self.token,
                csrf=self.csrf,
                allowed_hosts=self.allowed_hosts,
            )
            await self._http.start(app)
        except BaseException:
            await self._client.close()
            raise
        log.info("dashboard at %s", self.url)

    async def stop(self) -> None:
        self._closing.set()
        await self._http.stop()
        await self._client.close()
