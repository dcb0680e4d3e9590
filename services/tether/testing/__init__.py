"""Test helpers users can import too: a real nats-server and polling with a deadline."""

from tether.testing.polling import eventually, wait_until
from tether.testing.servers import nats_server_url

__all__ = ["eventually", "nats_server_url", "wait_until"]
