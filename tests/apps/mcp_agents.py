"""An agent whose tools come from MCP servers, for the MCP tool tests.

Its servers are `$TETHER_TEST_MCP_SERVERS` (space-separated URLs), read when `app` is
first looked up, so a worker started as a subprocess serves the servers its test runs.
"""

from __future__ import annotations

import functools
import os

from tests.apps.agents import MODEL, QUICK
from tether import Agent, App


def make_app(servers: list[str]) -> App:
    app = App("mcp-agents")
    app.add(
        Agent(
            "clerk",
            model=MODEL,
            instructions="You run errands with the tools you have.",
            mcp_servers=servers,
            max_turns=6,
            retry=QUICK,
        )
    )
    return app


@functools.cache
def _app() -> App:
    return make_app(os.environ["TETHER_TEST_MCP_SERVERS"].split())


def __getattr__(name: str) -> App:
    if name == "app":
        return _app()
    raise AttributeError(name)
