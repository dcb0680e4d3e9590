"""Tools written as people write them (issue 40 item 6), served by a real worker: a
Pydantic model as input and output, a plain function of several parameters whose
docstring describes them, a tool without `ctx`, an agent answering with a Pydantic
model; and a misspelled tool in an agent's `tools=[...]` named with a close match."""

from __future__ import annotations

import json
import logging

import pytest

from tests.apps.written import Verdict, app, judge
from tests.conftest import MakeWorker
from tether import Agent, App, Client, OpenAIModel, StepContext, TaskFailedError
from tether.nats.store import Store
from tether.schemas.tool_schema import arguments_schema
from tether.testing.llm import ScriptedModel


async def test_a_pydantic_input_runs_and_its_output_is_stored_as_json(
    client: Client, make_worker: MakeWorker
) -> None:
    await make_worker(app)

    handle = await client.submit([{"tool": "search", "input": {"text": "nats", "limit": 2}}])

    assert await handle.wait(timeout=30) == [
        {"title": "nats 1", "rank": 1},
        {"title": "nats 2", "rank": 2},
    ]


async def test_a_bad_pydantic_input_fails_the_step_naming_the_field(
    client: Client, make_worker: MakeWorker
) -> None:
    await make_worker(app)

    handle = await client.submit([{"tool": "search", "input": {"text": "nats", "limit": 0}}])

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and error.type == "InvalidInput"
    assert error.message.startswith("search: ") and "`$.limit`" in error.message
    assert "greater than or equal to 1" in error.message


async def test_a_plain_function_advertises_its_parameters_and_runs(
    client: Client, store: Store, make_worker: MakeWorker
) -> None:
    await make_worker(app)

    info = await store.tools.get("get_weather")
    assert info is not None
    assert info.description == "Get the current weather in a city."
    schema, wrapped = arguments_schema(info.input_schema)
    assert not wrapped and schema["type"] == "object"
    assert schema["required"] == ["city"]
    assert schema["properties"] == {
        "city": {"type": "string", "description": 'The city, as people write it (e.g. "Paris").'},
        "unit": {"type": "string", "default": "C", "description": '"C" or "F".'},
    }
    handle = await client.submit([{"tool": "get_weather", "input": {"city": "Oslo"}}])
    assert await handle.wait(timeout=30) == "18°C in Oslo"


async def test_an_unannotated_tool_returning_a_model_stores_it_as_json(
    client: Client, make_worker: MakeWorker
) -> None:
    await make_worker(app)

    handle = await client.submit([{"tool": "top_hit", "input": "nats"}])
    assert await handle.wait(timeout=30) == {"title": "nats", "rank": 1}


async def test_a_tool_without_ctx_or_input_runs(client: Client, make_worker: MakeWorker) -> None:
    await make_worker(app)

    handle = await client.submit([{"tool": "today", "input": None}])

    assert await handle.wait(timeout=30) == "2026-12-03"


async def test_an_agent_answers_with_a_pydantic_model(
    client: Client, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(app)
    call = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
    answer = {"city": "Oslo", "warm": False, "degrees": 18}
    question = model.conversation(call, {"content": json.dumps(answer)})

    handle = await client.submit_agent(judge, question)

    assert await handle.wait(timeout=30) == Verdict(city="Oslo", warm=False, degrees=18)
    assert (await handle.get()).result == answer  # plain JSON for any reader
    first, second = model.requests(question)
    asked = first["response_format"]["json_schema"]
    assert asked["name"] == "Verdict" and asked["strict"] is True
    assert asked["schema"]["required"] == ["city", "warm", "degrees"]
    assert "18°C in Oslo" in second["last"]["text"]


async def _nothing(ctx: StepContext) -> None: ...


async def test_a_misspelled_tool_is_named_with_the_close_one(
    make_worker: MakeWorker, caplog: pytest.LogCaptureFixture
) -> None:
    mine = App("misspelled")
    mine.tool(_nothing, name="get_weather")
    caplog.set_level(logging.WARNING)
    agent = Agent("asker", model=OpenAIModel("scripted", api_key="test"), tools=["get_wether"])

    mine.add(agent)
    added = [r.getMessage() for r in caplog.records if r.name == "tether.tools"]
    assert added == [
        "app 'misspelled': agent 'asker' lists tool 'get_wether', which this app does not "
        "have: did you mean 'get_weather'? (its turns wait until a worker serves 'get_wether')"
    ]
    await make_worker(mine)

    said = [r.getMessage() for r in caplog.records if r.name == "tether.worker"]
    assert any(
        "agent 'asker' lists tool 'get_wether'" in line and "did you mean 'get_weather'?" in line
        for line in said
    ), said
