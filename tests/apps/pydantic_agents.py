"""Pydantic AI agents, unchanged, added to a Tether app (`app.add(agent)`); the model is
the scripted one at $OPENAI_BASE_URL (read when a call is made), so workers in
subprocesses find it too. Tools record each execution; `slow_lookup` waits at its gate
(see tests/apps/foreign.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import AgentStreamEvent

from tests.apps.foreign import chore, gate, record, slow_chore
from tether import App
from tether.integrations.pydantic_ai import TetherDurability, step_context

os.environ.setdefault("OPENAI_API_KEY", "test")
app = App("pydantic_agents")
MODEL = "openai:gpt-4o-mini"
CHAT = "openai-chat:gpt-4o-mini"
"""On the Chat Completions API: the scripted model logs its `max_tokens`, and takes a
reply of text and tool calls as one assistant message."""


helper = Agent(MODEL, name="pai_helper", instructions="Use the tools.", defer_model_check=True)


@helper.tool_plain
def add(a: int, b: int) -> int:
    """Add two numbers."""
    record("add")
    return a + b


@helper.tool_plain
async def slow_lookup(city: str) -> str:
    """Look a city up (slowly: it waits at the gate named by the city)."""
    record("slow_lookup")
    await gate(city)
    return f"{city}: sunny"


@helper.tool_plain(requires_approval=True)
def delete_rows(table: str) -> str:
    """Delete every row of a table (asks a person first)."""
    record(f"delete_rows {table}")
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


chat = Agent(CHAT, name="pai_chat", tools=[add, slow_lookup], defer_model_check=True)
planner = Agent(
    CHAT, name="pai_planner", output_type=Forecast, tools=[add, slow_lookup], defer_model_check=True
)
"""Two tools and a typed output: the crash test kills it in its second tool."""

chores = Agent(CHAT, name="pai_chores", tools=[chore, slow_chore], defer_model_check=True)
"""Jobs a response asks for together: they run at once (tests/apps/foreign.py)."""


app.add(helper)
app.add(forecaster)
app.add(chat)
app.add(planner)
app.add(explicit)
app.add(chores)
