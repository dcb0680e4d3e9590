"""`ApiService`: the request/reply API as a role of `tether dispatcher` or `tether api`."""

from __future__ import annotations

from faststream.nats import NatsBroker
from faststream.security import BaseSecurity

from services.api.discovery import Discovery
from services.api.routes import build_broker
from services.client import Client
from services.nats.connection import NatsConfig
from services.nats.provision import Layout
from services.service import Service


class ApiService(Service):
    """Answers `tether.api.<verb>`; stateless, so any number of replicas share the load."""

    def __init__(self, nats: NatsConfig | None = None, *, layout: Layout | None = None) -> None:
        self.nats = nats or NatsConfig()
        self.discovery = Discovery()
        self._client = Client(self.nats, layout=layout)
        tls = self.nats.tls_context()
        self.broker: NatsBroker = build_broker(
            self.nats.names,
            lambda: self._client,
            self.discovery,
            servers=self.nats.servers,
            user_credentials=self.nats.credentials,
            token=self.nats.token,
            security=BaseSecurity(ssl_context=tls) if tls else None,
            connect_timeout=self.nats.connect_timeout,
        )

    async def start(self) -> None:
        await self._client.connect()
        await self.broker.start()

    async def stop(self) -> None:
        await self.broker.stop()
        await self._client.close()
