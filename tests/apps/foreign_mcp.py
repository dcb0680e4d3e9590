"""A Pydantic AI agent and an OpenAI Agents SDK agent whose tools come from an MCP server
(tests/apps/mcp_server.py), unchanged, added to an app; the model is the scripted one at
$OPENAI_BASE_URL. The server is `$TETHER_TEST_MCP_SERVERS`, read when `app` is first
looked up, so a worker started as a subprocess serves the server its test runs."""

from __future__ import annotations

import functools
import os

from agents import Agent as SdkAgent
from agents import set_default_openai_api, set_default_openai_key
from agents.mcp import MCPServerStreamableHttp
from pydantic_ai import Agent as PaiAgent
from pydantic_ai.mcp import MCPToolset

from tether import App

set_default_openai_api("chat_completions")  # what the scripted model serves, and records
set_default_openai_key("test", use_for_tracing=False)
os.environ.setdefault("OPENAI_API_KEY", "test")
INSTRUCTIONS = "You run errands with the tools you have."


def make_app(url: str) -> App:
    app = App("foreign-mcp")
    app.add(
        SdkAgent(
            name="oai_clerk",
            instructions=INSTRUCTIONS,
            mcp_servers=[MCPServerStreamableHttp(params={"url": url}, name="shop")],
            model="scripted",
        )
    )
    app.add(
        PaiAgent(
            "openai-chat:gpt-4o-mini",
            name="pai_clerk",
            instructions=INSTRUCTIONS,
            toolsets=[MCPToolset(url, id="shop")],
            defer_model_check=True,
        )
    )
    return app


@functools.cache
def _app() -> App:
    return make_app(os.environ["TETHER_TEST_MCP_SERVERS"].split()[0])


def __getattr__(name: str) -> App:
    if name == "app":
        return _app()
    raise AttributeError(name)
