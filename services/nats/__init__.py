"""The NATS layer: connect, provision, the embedded server and the durable store."""

from services.nats.connection import NatsConfig, connect
from services.nats.provision import Layout, provision
from services.nats.server import NatsServer, NatsServerError, find_nats_server
from services.nats.store import Store

__all__ = [
    "Layout",
    "NatsConfig",
    "NatsServer",
    "NatsServerError",
    "Store",
    "connect",
    "find_nats_server",
    "provision",
]
