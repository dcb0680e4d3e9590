"""An OpenAI Agents SDK agent on the SDK's default API, the Responses API (the scripted
model's `/v1/responses`, at $OPENAI_BASE_URL). The API is a per-process default, which
tests/apps/openai_agents.py sets to Chat Completions: run this app in worker processes
of its own. Tools record each execution; `slow_lookup` waits at its gate (see
tests/apps/foreign.py)."""

from __future__ import annotations

from agents import Agent, function_tool, set_default_openai_key

from tests.apps import foreign
from tether import App

set_default_openai_key("test", use_for_tracing=False)

app = App("openai_responses")
get_weather = function_tool(foreign.get_weather)
slow_lookup = function_tool(foreign.slow_lookup)
modern = app.add(
    Agent(
        name="oai_responses",
        instructions="Answer with the tools.",
        tools=[get_weather, slow_lookup],
        model="scripted",
    )
)
