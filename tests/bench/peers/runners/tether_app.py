"""The bench agent on Tether, twice: the Pydantic AI agent added unchanged
(`app.add(agent)`), and Tether's own `Agent` over the same two tools as Tether tools."""

from __future__ import annotations

import bench_agent
from pydantic_ai import Tool

from tether import Agent, App, OpenAIModel
from tether.integrations.pydantic_ai import as_tool

app = App("bench_peers")
app.add(bench_agent.build_agent("bench_pai"))


# The 200-turn run: Pydantic AI's default limits would stop it at 50 requests.
app.add(as_tool(bench_agent.build_agent("bench_pai_long"), usage_limits=bench_agent.LIMITS))


@app.tool
async def get_weather(run: str, turn: int, sleep_ms: int, city: str) -> str:
    """The weather in a city, in degrees Celsius."""
    return await bench_agent.get_weather(run, turn, sleep_ms, city)


@app.tool
async def to_fahrenheit(run: str, turn: int, sleep_ms: int, celsius: int) -> str:
    """Convert degrees Celsius to Fahrenheit."""
    return await bench_agent.to_fahrenheit(run, turn, sleep_ms, celsius)


app.add(
    Agent(
        "bench_native",
        model=OpenAIModel("bench"),
        instructions=bench_agent.INSTRUCTIONS,
        tools=["get_weather", "to_fahrenheit"],
        max_turns=1000,
    )
)


# The approval scenario: the same agent, `get_weather` waiting for a person's approval
# (Pydantic AI's `requires_approval`, a Tether input wait through the integration).
gated = Tool(bench_agent.get_weather, requires_approval=True)
app.add(bench_agent.build_agent("bench_pai_wait", tools=[gated, bench_agent.to_fahrenheit]))
app.add(
    Agent(
        "bench_native_wait",
        model=OpenAIModel("bench"),
        instructions=bench_agent.INSTRUCTIONS,
        tools=["get_weather", "to_fahrenheit"],
        approval=["get_weather"],
    )
)
