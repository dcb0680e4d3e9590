"""Test helpers users can import too: a real nats-server, polling with a deadline, and
`tether.testing.llm.ScriptedModel`, an offline OpenAI-compatible model for agent tests."""

from tether.testing.polling import eventually, wait_until
from tether.testing.servers import nats_server_url

__all__ = ["eventually", "nats_server_url", "wait_until"]
