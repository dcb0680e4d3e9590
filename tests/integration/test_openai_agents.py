"""An unchanged OpenAI Agents SDK agent added with `app.add`: submitted like Tether's own,
its tools called, its typed output JSON, its tokens streamed live, its usage counted and
budgeted, its approvals answered as input (real `openai` client through the SDK, scripted
model in its own process)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.apps.openai_agents import app as oai
from tests.conftest import MakeWorker
from tests.foreign_agents import call, ran, spent, turns, usage, waiting
from tether import Client, TaskFailedError, TaskStatus, TokenChunk
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.usefixtures("sdk_client")


@pytest.fixture
async def worker(make_worker: MakeWorker, model: ScriptedModel) -> object:
    return await make_worker(oai)


async def test_an_unchanged_agent_answers_with_its_tools_called(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    city = f"city-{uuid.uuid4().hex[:6]}"
    question = model.conversation(
        call("get_weather", city=city), {"content": f"It is sunny in {city}."}
    )

    handle = await client.submit_agent("oai_helper", question)

    assert await handle.wait(timeout=30) == f"It is sunny in {city}."
    assert ran(executions, f"get_weather {city}") == 1
    calls = model.requests(question)
    assert calls[1]["tool_texts"] == [f"sunny in {city}"]
    counted = await spent(handle)
    assert counted.requests == 2 == len(calls)
    assert counted.input_tokens > 0 and counted.output_tokens > 0


async def test_typed_output_comes_back_as_json_of_its_schema(
    client: Client, worker: object, model: ScriptedModel
) -> None:
    forecast = {"city": "Oslo", "celsius": 3, "rain": True}
    question = model.conversation({"content": '{"city": "Oslo", "celsius": 3, "rain": true}'})

    handle = await client.submit_agent("oai_forecaster", question)

    assert await handle.wait(timeout=30) == forecast
    (sent,) = model.requests(question)
    assert sent["response_format"]["type"] == "json_schema"
    info = await client.tools()
    schema = next(t for t in info if t.name == "oai_forecaster").output_schema
    assert schema is not None and set(schema["properties"]) == {"city", "celsius", "rain"}


async def test_tokens_reach_the_task_stream_while_the_model_writes(
    client: Client, worker: object, model: ScriptedModel
) -> None:
    answer = " ".join(f"word{n}" for n in range(60))
    question = model.conversation({"content": answer}, chunk_delay=0.05)
    handle = await client.submit_agent("oai_helper", question)

    chunks: list[TokenChunk] = []
    async for chunk in handle.stream():
        if not chunks:
            status = (await handle.get()).status
            assert status in {TaskStatus.PENDING, TaskStatus.RUNNING}  # before the end
        chunks.append(chunk)

    assert "".join(c.delta for c in chunks) == answer
    assert len([c for c in chunks if c.delta]) > 10  # as it arrives, not one piece
    assert {(c.step, c.attempt) for c in chunks} == {(0, 1)}
    assert await handle.wait(timeout=30) == answer


async def test_a_token_budget_caps_each_call_and_stops_the_run_once_spent(
    client: Client, worker: object, model: ScriptedModel
) -> None:
    spend = {"usage": usage(300, 200)}
    question = model.conversation(
        {**call("get_weather", city="Rome"), **spend},
        {"content": "Sunny.", **spend},
    )

    handle = await client.submit_agent("oai_helper", question, token_budget=520)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and "BudgetExceeded" in error.type
    calls = model.requests(question)
    assert len(calls) == 1 and calls[0]["max_tokens"] is not None, calls
    assert calls[0]["max_tokens"] <= 520  # sent with the most the budget lets it answer
    assert (await spent(handle)).total_tokens == 500


async def test_an_approval_makes_the_task_wait_and_the_answer_resumes_it(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    question = model.conversation(
        call("get_weather", city=path),
        call("read_clock", zone=path),
        call("delete_file", path=path),
        {"content": "Deleted."},
    )
    handle = await client.submit_agent("oai_helper", question)

    asked = await waiting(handle)
    assert asked.input_request is not None and "delete_file" in asked.input_request.prompt
    assert ran(executions, f"delete_file {path}") == 0
    await client.send_input(handle.task_id, {"approved": True})

    assert await handle.wait(timeout=30) == "Deleted."
    assert ran(executions, f"delete_file {path}") == 1
    assert ran(executions, f"get_weather {path}") == 1  # journaled: read back on resume
    assert ran(executions, f"read_clock {path}") == 2  # idempotent: runs again instead
    assert turns(model, question) == {0: 1, 1: 1, 2: 1, 3: 1}  # none sent again
    calls = model.requests(question)
    assert calls[3]["tool_texts"][-1] == f"deleted {path}"
    assert (await spent(handle)).requests == 4


async def test_a_rejected_call_does_not_run_and_the_model_is_told_why(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    question = model.conversation(call("delete_file", path=path), {"content": "Not deleted."})
    handle = await client.submit_agent("oai_helper", question)

    await waiting(handle)
    await client.send_input(handle.task_id, {"approved": False, "reason": "keep it"})

    assert await handle.wait(timeout=30) == "Not deleted."
    assert ran(executions, f"delete_file {path}") == 0
    calls = model.requests(question)
    assert calls[1]["tool_texts"] == ["keep it"]


async def test_a_handoff_and_a_sub_agent_run_durably_in_one_task(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    topic = f"topic-{uuid.uuid4().hex[:6]}"
    question = f"question {uuid.uuid4().hex[:8]}"
    triage = [
        call("research", input=topic),
        call("transfer_to_oai_specialist"),
        {"content": "The specialist answers."},
    ]
    sub = [call("get_weather", city=topic), {"content": f"{topic} is sunny."}]
    conversations = [{"match": question, "turns": triage}, {"match": topic, "turns": sub}]
    model.load({"conversations": conversations})

    handle = await client.submit_agent("oai_triage", question)

    assert await handle.wait(timeout=30) == "The specialist answers."
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}
    assert turns(model, topic) == {0: 1, 1: 1}
    assert ran(executions, f"get_weather {topic}") == 1
    calls = model.requests(question)
    assert calls[1]["tool_texts"] == [f"{topic} is sunny."]  # the sub-agent's answer
    assert calls[2]["system"] == "You handle billing."  # the specialist took over
    assert (await spent(handle)).requests == 5  # nested calls counted


async def test_the_drop_in_runner_journals_runs_a_tool_makes_itself(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    text = f"text {uuid.uuid4().hex[:8]}"
    first = [call("get_weather", city=text), {"content": "One."}]
    again = {"match": f"{text} again", "turns": [{"content": "Two."}]}
    model.load({"conversations": [again, {"match": text, "turns": first}]})

    handle = await client.submit([{"tool": "summarize", "input": text}])

    assert await handle.wait(timeout=30) == "One. / Two."
    assert ran(executions, f"get_weather {text}") == 1
    assert (await spent(handle)).requests == 3


async def test_the_drop_in_run_streamed_streams_to_the_task_and_to_its_caller(
    client: Client, worker: object, model: ScriptedModel
) -> None:
    text = f"text {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": text, "turns": [{"content": "A streamed answer."}]}]})

    handle = await client.submit([{"tool": "summarize_streamed", "input": text}])

    assert await handle.wait(timeout=30) == "A streamed answer."
    chunks = [chunk async for chunk in handle.stream()]
    assert "".join(c.delta for c in chunks) == "A streamed answer."


async def test_a_failed_attempt_is_retried_and_each_call_counted_once(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    city = f"city-{uuid.uuid4().hex[:6]}"
    broken = [{"status": 500}] * 3  # past the openai client's own two retries
    question = model.conversation(
        call("get_weather", city=city), {"content": "Sunny.", "faults": broken}
    )

    handle = await client.submit_agent("oai_helper", question)

    assert await handle.wait(timeout=60) == "Sunny."
    assert ran(executions, f"get_weather {city}") == 1  # the retry read it back
    assert turns(model, question) == {0: 1, 1: 4}  # the first turn was not sent again
    assert (await spent(handle)).requests == 2  # not 3: counted once
