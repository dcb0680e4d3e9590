"""The NATS layer: connect, provision, the embedded server and the durable store."""

from tether.nats.connection import NatsConfig, connect
from tether.nats.layout import Layout
from tether.nats.provision import provision
from tether.nats.server import NatsServer, NatsServerError, find_nats_server
from tether.nats.store import Store

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
