"""`ApiService`: the request/reply API as a role of `tether dispatcher` or `tether api`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from faststream.nats import NatsBroker
from faststream.security import BaseSecurity

from tether.api.discovery import Discovery
from tether.api.routes import build_broker
from tether.client import Client
from tether.errors import NatsUnavailableError
from tether.nats.connection import NatsConfig
from tether.nats.layout import Layout
from tether.service import Service

if TYPE_CHECKING:
    from tether.metrics import Metrics


class ApiService(Service):
    """Answers `tether.api.<verb>`; stateless, so any number of replicas share the load."""

    def __init__(
        self,
        nats: NatsConfig | None = None,
        *,
        layout: Layout | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.nats = nats or NatsConfig()
        self.metrics = metrics
        """Counts the tasks `submit` starts (it records them itself)."""
        self.discovery = Discovery()
        self._client = Client(self.nats, layout=layout)
        self.broker: NatsBroker | None = None
        self._stopping = False

    def _broker(self, nats: NatsConfig) -> NatsBroker:
        tls = nats.tls_context()
        return build_broker(
            nats.names,
            lambda: self._client,
            self.discovery,
            servers=nats.servers,
            user_credentials=nats.credentials,
            nkeys_seed=nats.nkey_seed,
            token=nats.token,
            security=BaseSecurity(ssl_context=tls) if tls else None,
            connect_timeout=nats.connect_timeout,
            inbox_prefix=nats.replies,
            closed_cb=self._broker_closed,
        )

    async def _broker_closed(self) -> None:
        if not self._stopping:
            self.connection_lost("the API's NATS connection closed for good")

    def parts(self) -> list[Service]:
        return [self._client]

    async def start(self) -> None:
        await self._client.connect()
        if self.metrics is not None:
            self._client.count_into(self.metrics)
        self.broker = self._broker(self.nats.with_embedded_token())
        await self.broker.start()
        await self._wait_until_answering()

    async def _wait_until_answering(self, timeout: float = 10.0) -> None:
        """Return once this instance answers its own `$SRV.PING`: a flush alone can overtake
        subscriptions still buffered in nats-py, so the first requests would find no one."""
        subject = self.discovery.ping_subject
        deadline = time.monotonic() + timeout
        while not await self._client.answers(subject, timeout=0.25):
            if time.monotonic() > deadline:
                raise NatsUnavailableError(
                    f"the API did not answer its own {subject} within {timeout:.0f}s"
                )

    async def stop(self) -> None:
        self._stopping = True
        if self.broker is not None:
            await self.broker.stop()
        await self._client.close()
