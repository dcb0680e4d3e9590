"""An agent and the tools it calls, for the agent tests; the model is the scripted one
at $OPENAI_BASE_URL (each test starts it), so workers in subprocesses find it too."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from tests.apps.tools import BEAT, record
from tether import (
    Agent,
    App,
    GuardrailTripped,
    NeedsInput,
    OpenAIModel,
    RetryPolicy,
    Sleep,
    StepContext,
    TerminalError,
)

app = App("agents")
MODEL = OpenAIModel("scripted", api_key="test")
QUICK = RetryPolicy(max_attempts=4, initial_backoff=0.05, max_backoff=0.2, jitter=0.0)


class Search(msgspec.Struct):
    query: str


@app.tool(heartbeat=BEAT)
async def web_search(ctx: StepContext, q: Search) -> list[str]:
    """Search the web; returns snippets."""
    record(ctx, "web_search")
    return [f"{q.query}: result {n}" for n in (1, 2)]


@app.tool(heartbeat=BEAT)
async def slow_search(ctx: StepContext, q: Search) -> list[str]:
    """A search that takes a while (crash tests kill the worker while it runs)."""
    record(ctx, "slow_search")
    await asyncio.sleep(2.0)
    return [f"{q.query}: slow result"]


@app.tool(heartbeat=BEAT, approval=True)
async def send_email(ctx: StepContext, data: dict[str, Any]) -> str:
    """Send an email (asks a person first)."""
    record(ctx, "send_email")
    return f"sent to {data.get('to')}"


@app.tool(heartbeat=BEAT)
async def shout(ctx: StepContext, text: str) -> str:
    """Upper-case a text (its input is a string, not an object)."""
    record(ctx, "shout")
    return text.upper()


researcher = app.add(
    Agent(
        "researcher",
        model=MODEL,
        instructions="You research questions with the tools you have.",
        tools=["web_search", "slow_search", "send_email", "shout"],
        max_turns=6,
        retry=QUICK,
    )
)


hasty = app.add(
    Agent(
        "hasty",
        model=MODEL,
        tools=["web_search"],
        approval=["web_search"],  # asks before every search, and not for long
        approval_timeout=0.5,
        retry=QUICK,
    )
)


modern = app.add(
    Agent(
        "modern",
        model=OpenAIModel("scripted", api_key="test", api="responses"),  # OpenAI's newer API
        instructions="You research with the Responses API.",
        tools=["web_search"],
        retry=QUICK,
    )
)


@app.tool(heartbeat=BEAT)
async def snooze(ctx: StepContext, data: dict[str, Any]) -> Sleep:
    """Come back with an answer a moment later (the call sleeps, holding no worker)."""
    record(ctx, "snooze")
    return Sleep(0.5, output=f"rested {data.get('for')}")


sleepy = app.add(Agent("sleepy", model=MODEL, tools=["snooze", "web_search"], retry=QUICK))


class Transfer(msgspec.Struct):
    to: str
    amount: int


@app.tool(heartbeat=BEAT, approval=True)
async def transfer(ctx: StepContext, data: Transfer) -> str:
    """Move money (asks a person first, who may change the amount)."""
    record(ctx, "transfer")
    return f"sent {data.amount} to {data.to}"


payer = app.add(Agent("payer", model=MODEL, tools=["transfer"], retry=QUICK))


billing = app.add(
    Agent(
        "billing",
        model=MODEL,
        instructions="You handle billing questions.",
        tools=["web_search"],
        retry=QUICK,
    )
)


triage = app.add(
    Agent(
        "triage",
        model=MODEL,
        instructions="Hand each question to the right agent.",
        handoffs=["billing"],  # the model may call transfer_to_billing
        retry=QUICK,
    )
)


thrifty = app.add(
    Agent(
        "thrifty",
        model=MODEL,
        tools=["web_search"],
        on_budget="fail",  # a spent budget fails the task instead of asking
        retry=QUICK,
    )
)


hesitant = app.add(
    Agent(
        "hesitant",
        model=MODEL,
        tools=["web_search", "send_email"],
        approval_timeout=0.5,  # nobody answers in time: the calls still waiting are denied
        approval_timeout_denies=True,
        retry=QUICK,
    )
)


@app.tool(heartbeat=BEAT)
async def close_account(ctx: StepContext, data: dict[str, Any]) -> str:
    """Close an account; refuses for good when the account is frozen."""
    record(ctx, "close_account")
    raise TerminalError(f"account {data.get('account')} is frozen: stop the whole run")


guarded = app.add(
    Agent(
        "guarded",
        model=MODEL,
        tools=["web_search", "close_account"],
        token_budget=10_000,
        retry=QUICK,
    )
)


unreachable = app.add(
    Agent(
        "unreachable",
        model=OpenAIModel("nowhere", base_url="http://127.0.0.1:9/v1", api_key="test"),
        retry=RetryPolicy(max_attempts=2, initial_backoff=60, jitter=0.0),
    )
)


refused = app.add(
    Agent(
        "refused",
        model=OpenAIModel("nowhere", base_url="http://127.0.0.1:9/v1", api_key="test"),
        retry=QUICK,  # every attempt refused at once, each retry soon after
    )
)


class Report(msgspec.Struct, frozen=True):
    """A typed answer: the agent's result is one of these."""

    title: str
    score: int
    sources: list[str]


reporter = app.add(
    Agent(
        "reporter",
        model=MODEL,
        instructions="Research, then report.",
        tools=["web_search"],
        output_type=Report,
        retry=QUICK,
    )
)


terse_reporter = app.add(
    Agent(
        "terse_reporter",
        model=MODEL,
        output_type=Report,  # its endpoint may refuse json_schema: then a final_answer call
        retry=QUICK,
    )
)


chatty = app.add(
    Agent(
        "chatty",
        model=MODEL,
        instructions="Talk at length.",
        tools=["shout"],
        max_turns=30,
        retry=QUICK,
    )
)


analyst = app.add(
    Agent(
        "analyst",
        model=MODEL,
        instructions="Analyse with the help of a researcher.",
        tools=["researcher", "guarded"],  # sub-agents: each call runs as a child task
        retry=QUICK,
    )
)


lead = app.add(
    Agent(
        "lead",
        model=MODEL,
        instructions="Delegate to the analyst.",
        tools=["analyst"],
        retry=QUICK,
    )
)


def no_secrets(ctx: StepContext, question: str) -> str:
    """An input guardrail, a plain function (the agent registers it as a tool)."""
    if "password" in question.lower():
        raise GuardrailTripped("the question asks for a password")
    return "ok"


@app.tool
async def polite(ctx: StepContext, answer: str) -> str:
    """An output guardrail, a tool like any other."""
    if "stupid" in answer.lower():
        raise GuardrailTripped("the answer is rude")
    return "ok"


careful = app.add(
    Agent(
        "careful",
        model=MODEL,
        input_guardrails=[no_secrets],
        output_guardrails=[polite],
        retry=QUICK,
    )
)


forced = app.add(
    Agent(
        "forced",
        model=MODEL,
        tools=["web_search"],
        tool_choice="required",  # the first call must use a tool; later ones choose
        retry=QUICK,
    )
)


@app.tool(heartbeat=BEAT)
async def confirm_refund(ctx: StepContext, data: dict[str, Any]) -> NeedsInput:
    """Refund money, once a person has confirmed it (it asks, whoever calls it)."""
    record(ctx, "confirm_refund")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    return NeedsInput(prompt=f"Refund {data.get('amount')}?", schema=schema)


cashier = app.add(
    Agent(
        "cashier",
        model=MODEL,
        tools=["confirm_refund", "web_search"],  # a tool that asks a person, and one that runs
        retry=QUICK,
    )
)
