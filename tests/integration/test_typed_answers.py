"""Typed answers (`Agent(..., output_type=...)`) through the real `openai` client
against the scripted model in its own process: asked for with a strict `json_schema`,
checked, told back to the model when wrong, and asked as a final-answer tool call from an
endpoint that refuses `json_schema`."""

from __future__ import annotations

import json

import pytest

from tests.apps.agents import Report, reporter, terse_reporter
from tether import Client, TaskFailedError, Worker
from tether.testing.llm import ScriptedModel

GOOD = {"title": "Durable agents", "score": 9, "sources": ["https://nats.io"]}
WRONG = {"title": "Durable agents", "score": "very high", "sources": []}


async def test_a_typed_answer_right_first_time_is_the_decoded_result(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "agents"}}]}
    question = model.conversation(search, {"content": json.dumps(GOOD)})

    handle = await client.submit_agent(reporter, question)

    assert await handle.wait(timeout=30) == Report(**GOOD)  # type: ignore[arg-type]
    record = await handle.get()
    assert record.result == GOOD  # stored as plain JSON: any language reads it
    calls = model.requests(question)
    assert len(calls) == 2
    asked = calls[0]["response_format"]
    assert asked["type"] == "json_schema"
    assert asked["json_schema"]["name"] == "Report" and asked["json_schema"]["strict"] is True
    schema = asked["json_schema"]["schema"]
    assert schema["required"] == ["title", "score", "sources"]
    assert schema["additionalProperties"] is False
    # by name, a handle gives the plain JSON
    assert await client.handle(handle.task_id).wait(timeout=5) == GOOD


async def test_a_wrong_answer_is_told_to_the_model_with_the_field_and_asked_again(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": json.dumps(WRONG)}, {"content": json.dumps(GOOD)})

    handle = await client.submit_agent(reporter, question)

    assert await handle.wait(timeout=30) == Report(**GOOD)  # type: ignore[arg-type]
    calls = model.requests(question)
    assert [(c["turn"], c["attempt"]) for c in calls] == [(0, 0), (1, 0)]  # no call twice
    told = calls[1]["last"]
    assert told["role"] == "user"
    assert "`$.score`" in told["text"] and "Expected `int`" in told["text"]
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 2


async def test_answers_that_never_fit_fail_the_task_naming_the_field(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    wrong = {"content": json.dumps(WRONG)}
    question = model.conversation(wrong, wrong, wrong)

    handle = await client.submit_agent(reporter, question)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and error.type == "InvalidOutput"
    assert "`$.score`" in error.message and "3 times" in error.message
    assert len(model.requests(question)) == 3  # the first answer and output_retries=2 more


async def test_text_that_is_not_json_is_a_wrong_answer_too(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Here is my report!"}, {"content": json.dumps(GOOD)})

    handle = await client.submit_agent(reporter, question)

    assert await handle.wait(timeout=30) == Report(**GOOD)  # type: ignore[arg-type]
    assert "not JSON" in model.requests(question)[1]["last"]["text"]


async def test_an_endpoint_that_refuses_json_schema_is_asked_for_a_final_answer_call(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    bad = {"tool_calls": [{"name": "final_answer", "arguments": WRONG}]}
    good = {"tool_calls": [{"name": "final_answer", "arguments": GOOD}]}
    question = model.conversation(bad, good, refuse_json_schema=True)

    handle = await client.submit_agent(terse_reporter, question)

    assert await handle.wait(timeout=30) == Report(**GOOD)  # type: ignore[arg-type]
    calls = model.requests(question)
    refused, *asked = calls
    assert refused["attempt"] == -1 and refused["response_format"]["type"] == "json_schema"
    assert [c["response_format"] for c in asked] == [None, None]
    assert all("final_answer" in c["tools"] and c["tool_choice"] == "required" for c in asked)
    told = asked[1]["last"]  # the wrong call's result says why
    assert told["role"] == "tool" and "`$.score`" in told["text"]
