"""A Pydantic AI agent's worker killed (SIGKILL) in the middle of its second tool call and
while its task waits for an approval: a new worker finishes the run, each finished model
call was sent once, the finished tool did not run again, and the task's usage is what
the model reported."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.foreign_agents import (
    PYDANTIC_AGENTS,
    Crashes,
    at_gate,
    call,
    executed,
    open_gate,
    spent,
    turns,
    usage,
    waiting,
)
from tether import Client, NatsConfig
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow


@pytest.fixture
async def crashes(
    config: NatsConfig,
    dispatcher: object,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Crashes:
    return await Crashes(config, PYDANTIC_AGENTS, tmp_path, monkeypatch).register()


async def test_a_typed_agent_killed_in_its_second_tool_reruns_only_that_tool(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    city, gates = f"c{uuid.uuid4().hex[:6]}", crashes.gates()
    forecast = {"city": city, "degrees": 5}
    question = model.conversation(
        {"content": "Adding first.", **call("add", a=2, b=3), "usage": usage(50, 5)},
        {"content": "Looking up.", **call("slow_lookup", city=city), "usage": usage(70, 6)},
        {**call("final_result", **forecast), "usage": usage(90, 7)},
    )
    handle = await crashes.killed_when(
        lambda: client.submit_agent("pai_planner", question),
        at_gate(gates, city),  # the second tool has started
    )
    open_gate(gates, city)

    assert await crashes.survive(handle) == forecast  # the typed output, as JSON
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    assert executed(executions) == {"add": 1, "slow_lookup": 2}  # the finished tool: once
    counted = await spent(handle)  # what the model reported, each call counted once
    assert (counted.requests, counted.input_tokens, counted.output_tokens) == (3, 210, 18)
    chunks = [c async for c in handle.stream()]
    won = max(c.attempt for c in chunks)
    text = "".join(c.delta for c in chunks if c.attempt == won)
    assert text == "Adding first.Looking up."  # each turn's text once, as it won


async def test_a_worker_killed_while_the_task_waits_for_approval_loses_nothing(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    question = model.conversation(
        call("add", a=1, b=2), call("delete_rows", table="old"), {"content": "3, and old is gone."}
    )
    handle = await crashes.killed_when(lambda: client.submit_agent("pai_helper", question), waiting)
    await handle.send_input({"approved": True})

    assert await crashes.survive(handle) == "3, and old is gone."
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}
    assert executed(executions) == {"add": 1, "delete_rows": 1}


async def test_an_agent_on_the_responses_api_killed_mid_tool_sends_no_finished_call_again(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    """`openai:` models call the Responses API (`/v1/responses`): the same journal."""
    city, gates = f"c{uuid.uuid4().hex[:6]}", crashes.gates()
    question = model.conversation(
        {"content": "Adding first.", **call("add", a=2, b=3), "usage": usage(50, 5)},
        {**call("slow_lookup", city=city), "usage": usage(70, 6)},
        {"content": f"{city}: sunny, and 5.", "usage": usage(90, 7)},
    )
    handle = await crashes.killed_when(
        lambda: client.submit_agent("pai_helper", question), at_gate(gates, city)
    )
    open_gate(gates, city)

    assert await crashes.survive(handle) == f"{city}: sunny, and 5."
    sent = model.requests(question)
    assert {r["api"] for r in sent} == {"responses"}
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    assert sent[2]["tool_texts"] == ["5", f"{city}: sunny"]
    assert executed(executions) == {"add": 1, "slow_lookup": 2}
    counted = await spent(handle)
    assert (counted.requests, counted.input_tokens, counted.output_tokens) == (3, 210, 18)
