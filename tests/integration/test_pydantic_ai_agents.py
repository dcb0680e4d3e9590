"""An unchanged Pydantic AI agent added to an app (`app.add(agent)`) runs as a Tether
tool: submitted like Tether's own agents, its tools called, its typed output JSON, its
tokens streamed live, its model calls counted and bounded by the task's budget, and its
`requires_approval` tools answered by a person while the task waits (real `openai`
client through Pydantic AI, scripted model in its own process)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.foreign_agents import call, spent, turns, usage, waiting
from tether import Client, TaskFailedError, TaskStatus, Worker
from tether.schemas import StepCompleted
from tether.testing.llm import ScriptedModel


@pytest.fixture
async def pai_worker(make_worker: object, model: ScriptedModel, executions: Path) -> Worker:
    from tests.apps.pydantic_agents import app

    worker: Worker = await make_worker(app)  # type: ignore[operator]
    return worker


def _tag() -> str:
    return uuid.uuid4().hex[:8]


async def test_an_unchanged_agent_answers_with_its_tools_called(
    client: Client, pai_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    question = model.conversation(call("add", a=2, b=3), {"content": "It is 5."})
    handle = await client.submit_agent("pai_helper", question)

    assert await handle.wait(timeout=30) == "It is 5."
    sent = model.requests(question)
    assert [r["turn"] for r in sent] == [0, 1]
    assert sent[1]["tool_texts"] == ["5"]
    assert executions.read_text().count("add") == 1


async def test_a_typed_output_comes_back_as_json_of_its_schema(
    client: Client, pai_worker: Worker, model: ScriptedModel
) -> None:
    final = call("final_result", city="Oslo", degrees=21)
    question = model.conversation(call("temperature", city="Oslo"), final)
    handle = await client.submit_agent("pai_forecaster", question)

    assert await handle.wait(timeout=30) == {"city": "Oslo", "degrees": 21}
    info = await client.tool("pai_forecaster")
    assert info is not None and info.output_schema is not None
    assert info.output_schema["properties"]["degrees"]["type"] == "integer"


async def test_tokens_stream_live_and_usage_is_summed_on_the_record(
    client: Client, pai_worker: Worker, model: ScriptedModel
) -> None:
    words = " ".join(f"w{n}" for n in range(200))
    question = model.conversation(
        {**call("add", a=1, b=1), "usage": usage(40, 7)},
        {"content": words, "usage": usage(60, 200)},
        chunk_delay=0.01,
    )
    handle = await client.submit_agent("pai_helper", question)

    first = await anext(aiter(handle.stream()))
    assert first.delta and (await handle.get()).status is not TaskStatus.COMPLETED
    assert await handle.wait(timeout=30) == words
    streamed = "".join([c.delta async for c in handle.stream()])
    assert streamed == words
    counted = await spent(handle)
    assert (counted.requests, counted.input_tokens, counted.output_tokens) == (2, 100, 207)
    assert len(model.requests(question)) == 2


async def test_a_token_budget_caps_each_call_it_allows(
    client: Client, pai_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "short"})
    handle = await client.submit_agent("pai_chat", question, token_budget=600)

    assert await handle.wait(timeout=30) == "short"
    [sent] = model.requests(question)
    assert sent["max_tokens"] is not None and 0 < sent["max_tokens"] < 600


async def test_a_spent_token_budget_stops_the_run_before_the_call(
    client: Client, pai_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "never sent"})
    handle = await client.submit_agent("pai_chat", question, token_budget=5)

    with pytest.raises(TaskFailedError, match="budget"):
        await handle.wait(timeout=30)
    assert model.requests(question) == []


async def test_an_approval_waits_for_a_person_and_the_tool_then_runs_once(
    client: Client, pai_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    table = f"t{_tag()}"
    question = model.conversation(call("delete_rows", table=table), {"content": "Deleted."})
    handle = await client.submit_agent("pai_helper", question)

    asked = await waiting(handle)
    assert asked.input_request is not None and table in asked.input_request.prompt
    assert "delete_rows" not in executions.read_text()
    await handle.send_input({"approved": True})

    assert await handle.wait(timeout=30) == "Deleted."
    assert executions.read_text().count("delete_rows") == 1
    assert [r["turn"] for r in model.requests(question)] == [0, 1]  # turn 0 replayed, not sent
    events = [e async for e in handle.events(timeout=5)]
    assert any(isinstance(e, StepCompleted) for e in events)


async def test_an_agent_with_tether_durability_attached_keeps_its_own_event_handler(
    client: Client, pai_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    from tests.apps.pydantic_agents import events_seen

    events_seen.clear()
    question = model.conversation(call("reindex", index="docs"), {"content": "Rebuilt the docs."})
    handle = await client.submit_agent("pai_explicit", question)

    assert await handle.wait(timeout=30) == "Rebuilt the docs."
    assert "".join([c.delta async for c in handle.stream()]) == "Rebuilt the docs."
    assert events_seen.count("FunctionToolCallEvent") == 1
    assert events_seen.count("FunctionToolResultEvent") == 1
    assert "PartDeltaEvent" in events_seen  # the model's live events, inside its unit
    assert executions.read_text().count("reindex") == 1


async def test_a_request_the_provider_refuses_fails_the_task_at_once(
    client: Client, pai_worker: Worker, model: ScriptedModel
) -> None:
    refused = {"content": "never", "faults": [{"status": 400, "message": "bad request"}]}
    question = model.conversation(refused)
    handle = await client.submit_agent("pai_chat", question)

    with pytest.raises(TaskFailedError, match="refused the request"):
        await handle.wait(timeout=30)
    assert len(model.requests(question)) == 1  # not retried: a second attempt would pass


async def test_a_failed_attempt_is_retried_and_each_call_counted_once(
    client: Client, pai_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    """The failed attempt's usage was counted with its failure: the retry that reads its
    model call back does not count it again."""
    broken = [{"status": 500}] * 3  # past the openai client's own two retries
    question = model.conversation(
        {**call("add", a=1, b=2), "usage": usage(40, 5)},
        {"content": "It is 3.", "usage": usage(60, 4), "faults": broken},
    )
    handle = await client.submit_agent("pai_chat", question)

    assert await handle.wait(timeout=60) == "It is 3."
    assert turns(model, question) == {0: 1, 1: 4}  # the first call was not sent again
    assert executions.read_text().count("add") == 1  # the retry read it back
    counted = await spent(handle)
    assert (counted.requests, counted.input_tokens, counted.output_tokens) == (2, 100, 9)


async def test_a_server_without_the_responses_api_is_said_with_how_to_call_chat(
    client: Client, pai_worker: Worker, model: ScriptedModel
) -> None:
    """`openai:` models call `/v1/responses`; a server that has only Chat Completions
    answers 404 there, and the error says what to name the model instead."""
    missing = {"content": "never", "faults": [{"status": 404, "message": "no such route"}]}
    question = model.conversation(missing)
    handle = await client.submit_agent("pai_helper", question)

    with pytest.raises(TaskFailedError, match="'openai-chat:gpt-4o-mini'"):
        await handle.wait(timeout=30)
    [sent] = model.requests(question)
    assert sent["api"] == "responses"
