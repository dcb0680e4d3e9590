"""Discovery through the NATS micro-service protocol: `$SRV.PING`, `$SRV.INFO`, `$SRV.STATS`.

Any NATS tool (`nats micro ls`, `nats micro info tether-api`) finds the API this way.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgspec
from faststream.nats import NatsBroker

from tether.clock import utcnow

NAME = "tether-api"
VERSION = "0.1.0"


class Endpoint(msgspec.Struct, kw_only=True):
    name: str
    subject: str
    queue_group: str = "tether-api"
    num_requests: int = 0
    num_errors: int = 0
    last_error: str = ""


class Discovery:
    """The identity and counters of one API instance, answered on `$SRV.*`."""

    def __init__(self, description: str = "Tether task API") -> None:
        self.id = uuid.uuid4().hex
        self.description = description
        self.started: datetime = utcnow()
        self.endpoints: dict[str, Endpoint] = {}

    @property
    def ping_subject(self) -> str:
        """The subject only this instance answers."""
        return f"$SRV.PING.{NAME}.{self.id}"

    def add_endpoint(self, name: str, subject: str) -> None:
        self.endpoints[name] = Endpoint(name=name, subject=subject)

    def count_request(self, name: str) -> None:
        if name in self.endpoints:
            self.endpoints[name].num_requests += 1

    def count_error(self, subject: str, exc: BaseException) -> None:
        for endpoint in self.endpoints.values():
            if endpoint.subject == subject:
                endpoint.num_errors += 1
                endpoint.last_error = str(exc)

    def _base(self, kind: str) -> dict[str, Any]:
        return {
            "type": f"io.nats.micro.v1.{kind}_response",
            "name": NAME,
            "id": self.id,
            "version": VERSION,
            "metadata": {},
        }

    def ping(self) -> dict[str, Any]:
        return self._base("ping")

    def info(self) -> dict[str, Any]:
        endpoints = [
            {"name": e.name, "subject": e.subject, "queue_group": e.queue_group, "metadata": {}}
            for e in self.endpoints.values()
        ]
        return {**self._base("info"), "description": self.description, "endpoints": endpoints}

    def stats(self) -> dict[str, Any]:
        endpoints = [
            {
                "name": e.name,
                "subject": e.subject,
                "queue_group": e.queue_group,
                "num_requests": e.num_requests,
                "num_errors": e.num_errors,
                "last_error": e.last_error,
                "processing_time": 0,
                "average_processing_time": 0,
            }
            for e in self.endpoints.values()
        ]
        return {**self._base("stats"), "started": self.started.isoformat(), "endpoints": endpoints}

    def subscribe(self, broker: NatsBroker) -> None:
        """Answer `$SRV.<VERB>`, `$SRV.<VERB>.tether-api` and `$SRV.<VERB>.tether-api.<id>`."""
        for verb, answer in (("PING", self.ping), ("INFO", self.info), ("STATS", self.stats)):
            for subject in (f"$SRV.{verb}", f"$SRV.{verb}.{NAME}", f"$SRV.{verb}.{NAME}.{self.id}"):
                broker.subscriber(subject, include_in_schema=False)(_responder(answer))


def _responder(answer: Any) -> Any:
    async def respond(body: Any) -> dict[str, Any]:
        result: dict[str, Any] = answer()
        return result

    return respond
