"""OpenAI Agents SDK agents, unchanged, added to an app; their model is the scripted one
at $OPENAI_BASE_URL (through the SDK's own OpenAI provider), so workers in subprocesses
find it too. Tools record each execution; `slow_lookup` waits at its gate (see
tests/apps/foreign.py)."""

from __future__ import annotations

from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    function_tool,
    handoff,
    input_guardrail,
    output_guardrail,
    set_default_openai_api,
    set_default_openai_key,
)
from pydantic import BaseModel

from tests.apps import foreign
from tests.apps.foreign import chore, record, slow_chore
from tether import App, StepContext
from tether.integrations.openai_agents import Runner, idempotent

set_default_openai_api("chat_completions")  # what the scripted model serves, and records
set_default_openai_key("test", use_for_tracing=False)

app = App("openai_agents")
get_weather = function_tool(foreign.get_weather)
slow_lookup = function_tool(foreign.slow_lookup)


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (asks a person first)."""
    record(f"delete_file {path}")
    return f"deleted {path}"


@idempotent
@function_tool
def read_clock(zone: str) -> str:
    """The time in a zone (a read: runs again on replay)."""
    record(f"read_clock {zone}")
    return "12:00"


class Forecast(BaseModel):
    city: str
    celsius: int
    rain: bool


helper = app.add(
    Agent(
        name="oai_helper",
        instructions="Answer weather questions with the tools.",
        tools=[get_weather, slow_lookup, delete_file, read_clock],
        model="scripted",
    )
)
forecaster = app.add(
    Agent(name="oai_forecaster", instructions="Forecast.", output_type=Forecast, model="scripted")
)
specialist = Agent(
    name="oai_specialist",
    instructions="You handle billing.",
    handoff_description="Billing questions.",
    tools=[get_weather],
    model="scripted",
)
researcher = Agent(
    name="oai_researcher", instructions="Research.", tools=[get_weather], model="scripted"
)
triage = app.add(
    Agent(
        name="oai_triage",
        instructions="Route billing to the specialist; research with the researcher.",
        handoffs=[handoff(specialist)],
        tools=[researcher.as_tool("research", "Research a topic."), delete_file],
        model="scripted",
    )
)
chores = app.add(
    Agent(
        name="oai_chores",
        instructions="Do the chores.",
        tools=[function_tool(chore), function_tool(slow_chore)],
        model="scripted",
    )
)
"""Jobs a response asks for together: they run at once (tests/apps/foreign.py)."""

summarizer = Agent(
    name="summarizer", instructions="Summarize.", tools=[get_weather, slow_lookup], model="scripted"
)


@app.tool
async def summarize(ctx: StepContext, text: str) -> str:
    """Calls the SDK itself, through the drop-in `Runner`: twice in one step."""
    first = await Runner.run(summarizer, text, ctx=ctx)
    second = await Runner.run(summarizer, f"{text} again", ctx=ctx)
    return f"{first.final_output} / {second.final_output}"


@app.tool
async def summarize_streamed(ctx: StepContext, text: str) -> str:
    """`Runner.run_streamed` through the drop-in: the caller's events, the task's tokens."""
    result = Runner.run_streamed(summarizer, text, ctx=ctx)
    kinds = [event.type async for event in result.stream_events()]
    assert "raw_response_event" in kinds
    return str(result.final_output)


@input_guardrail
def screened(context: Any, agent: Any, data: Any) -> GuardrailFunctionOutput:
    """Screens the input (records each run: a guardrail may call a model); trips on
    "forbidden"."""
    record(f"screened {data}")
    return GuardrailFunctionOutput(
        output_info={"seen": str(data)}, tripwire_triggered="forbidden" in str(data)
    )


@output_guardrail
def polite(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    """Checks the answer (records each run)."""
    record(f"polite {output}")
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


guarded = app.add(
    Agent(
        name="oai_guarded",
        instructions="Look keys up.",
        tools=[slow_lookup],
        input_guardrails=[screened],
        output_guardrails=[polite],
        model="scripted",
    )
)


@app.tool
async def guarded_twice(ctx: StepContext, text: str) -> str:
    """Two guarded runs through the drop-in `Runner` in one step: the first one's
    guardrails have run when the second one's tool is in flight."""
    first = await Runner.run(guarded, text, ctx=ctx)
    second = await Runner.run(guarded, f"{text} again", ctx=ctx)
    return f"{first.final_output} / {second.final_output}"
