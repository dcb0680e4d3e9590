"""Pydantic AI agents, unchanged, added to a Tether app (`app.add(agent)`); the model is
the scripted one at $OPENAI_BASE_URL (read when a call is made), so workers in
subprocesses find it too. Tools append a line per execution to $TETHER_TEST_EXECUTIONS."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import AgentStreamEvent

from tether import App
from tether.integrations.pydantic_ai import TetherDurability, step_context
from tether.testing import wait_until

os.environ.setdefault("OPENAI_API_KEY", "test")
app = App("pydantic_agents")
MODEL = "openai:gpt-4o-mini"


def record(tag: str) -> None:
    """One line per execution of a tool (one O_APPEND write, also from subprocesses)."""
    path = os.environ.get("TETHER_TEST_EXECUTIONS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{tag} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


helper = Agent(MODEL, name="pai_helper", instructions="Use the tools.", defer_model_check=True)


@helper.tool_plain
def add(a: int, b: int) -> int:
    """Add two numbers."""
    record("add")
    return a + b


@helper.tool_plain
async def slow_lookup(city: str) -> str:
    """Look a city up (slowly: it waits until $TETHER_TEST_RELEASE exists)."""
    record("slow_lookup")
    release = Path(os.environ.get("TETHER_TEST_RELEASE", "/nonexistent"))
    await wait_until(release.exists, timeout=120, message=f"{release} to exist")
    return f"{city}: sunny"


@helper.tool_plain(requires_approval=True)
def delete_rows(table: str) -> str:
    """Delete every row of a table (asks a person first)."""
    record("delete_rows")
    return f"deleted {table}"


class Forecast(BaseModel):
    city: str
    degrees: int


forecaster = Agent(MODEL, name="pai_forecaster", output_type=Forecast, defer_model_check=True)


@forecaster.tool_plain
def temperature(city: str) -> int:
    """The temperature in a city."""
    record("temperature")
    return 21


events_seen: list[str] = []


async def remember(ctx: object, events: AsyncIterable[AgentStreamEvent]) -> None:
    """The user's own event handler: it still gets every event."""
    async for event in events:
        events_seen.append(type(event).__name__)


explicit = Agent(
    MODEL,
    name="pai_explicit",
    capabilities=[TetherDurability(event_stream_handler=remember)],
    defer_model_check=True,
)
"""Durability attached by the user, with an event handler of their own."""


@explicit.tool_plain
async def reindex(index: str) -> str:
    """Rebuild a search index, reporting how far it got."""
    record("reindex")
    await step_context().progress(0.5, message=f"reindexing {index}")
    return f"{index} rebuilt"


chat = Agent(
    "openai-chat:gpt-4o-mini",
    name="pai_chat",
    tools=[add, slow_lookup],
    defer_model_check=True,
)
"""On the Chat Completions API: the scripted model logs its `max_tokens`, and takes a
reply of text and tool calls as one assistant message."""


app.add(helper)
app.add(forecaster)
app.add(chat)
app.add(explicit)
