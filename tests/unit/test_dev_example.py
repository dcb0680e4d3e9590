"""`tether dev`'s "Try:" line works for the app it serves: an agent gets a question, a
tool an input its own schema accepts (not only the demo)."""

from __future__ import annotations

import json
import shlex

import msgspec

from tether import Agent, App, StepContext
from tether.cli.dev import _example

LOCAL = "nats://127.0.0.1:4222"


class Forecast(msgspec.Struct):
    city: str
    days: int
    metric: bool = True


def test_a_tool_gets_an_input_its_schema_accepts() -> None:
    app = App("weather")

    @app.tool
    async def weather(ctx: StepContext, forecast: Forecast) -> str:
        return forecast.city

    line = _example(LOCAL, app.tools)

    words = shlex.split(line)
    assert words[:2] == ["tether", "submit"] and words[-1] == "--wait"
    name, _, value = words[2].partition("=")
    assert name == "weather"
    assert msgspec.convert(json.loads(value), Forecast) == Forecast(city="text", days=1)


def test_an_app_with_an_agent_is_asked_a_question() -> None:
    app = App("helpers")

    @app.tool
    async def lookup(ctx: StepContext, data: dict[str, str]) -> str:
        return ""

    app.add(Agent("helper", model="gpt-4o-mini", tools=["lookup"]))

    assert _example(LOCAL, app.tools) == "tether submit --agent helper 'What can you do?' --wait"


def test_a_tool_without_input_and_another_server() -> None:
    app = App("clock")

    @app.tool
    async def now(ctx: StepContext) -> str:
        return ""

    line = _example("nats://10.0.0.5:4222", app.tools)
    assert line == "TETHER_NATS_URL=nats://10.0.0.5:4222 tether submit now --wait"
