"""An unchanged OpenAI Agents SDK agent added with `app.add`: submitted like Tether's own,
its tools called, its typed output JSON, its tokens streamed live, its usage counted and
budgeted, its approvals answered as input (real `openai` client through the SDK, scripted
model in its own process)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.openai_agents import app as oai
from tests.conftest import MakeWorker
from tether import Client, TaskFailedError, TaskStatus
from tether.testing.llm import ScriptedModel


@pytest.fixture(autouse=True)
async def _fresh_http_client() -> AsyncIterator[None]:
    """The SDK shares one httpx client per process, bound to the event loop it was first
    used on; each test runs on a loop of its own (a worker has one for its life)."""
    import agents.models.openai_provider as provider

    yield
    if provider._http_client is not None:
        await provider._http_client.aclose()
        provider._http_client = None


@pytest.fixture
async def worker(make_worker: MakeWorker, model: ScriptedModel) -> object:
    return await make_worker(oai)


def _load(model: ScriptedModel, *turns: dict[str, Any]) -> str:
    question = f"question {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": question, "turns": list(turns)}]})
    return question


def _turns(model: ScriptedModel, question: str) -> Counter[int]:
    return Counter(r["turn"] for r in model.requests() if r["conversation"] == question)


def _ran(executions: Path, tag: str) -> int:
    return sum(1 for line in executions.read_text().splitlines() if line.startswith(tag + " "))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_an_unchanged_agent_answers_with_its_tools_called(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    city = f"city-{uuid.uuid4().hex[:6]}"
    question = _load(model, _call("get_weather", city=city), {"content": f"It is sunny in {city}."})

    handle = await client.submit_agent("oai_helper", question)

    assert await handle.wait(timeout=30) == f"It is sunny in {city}."
    assert _ran(executions, f"get_weather {city}") == 1
    calls = [r for r in model.requests() if r["conversation"] == question]
    assert calls[1]["tool_texts"] == [f"sunny in {city}"]
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 2 == len(calls)
    assert record.usage.input_tokens > 0 and record.usage.output_tokens > 0


async def test_typed_output_comes_back_as_json_of_its_schema(
    client: Client, worker: object, model: ScriptedModel
) -> None:
    forecast = {"city": "Oslo", "celsius": 3, "rain": True}
    question = _load(model, {"content": '{"city": "Oslo", "celsius": 3, "rain": true}'})

    handle = await client.submit_agent("oai_forecaster", question)

    assert await handle.wait(timeout=30) == forecast
    (call,) = [r for r in model.requests() if r["conversation"] == question]
    assert call["response_format"]["type"] == "json_schema"
    info = await client.tools()
    schema = next(t for t in info if t.name == "oai_forecaster").output_schema
    assert schema is not None and set(schema["properties"]) == {"city", "celsius", "rain"}


async def test_tokens_reach_the_task_stream_while_the_model_writes(
    client: Client, worker: object, model: ScriptedModel
) -> None:
    answer = " ".join(f"word{n}" for n in range(60))
    question = f"question {uuid.uuid4().hex[:8]}"
    turns = [{"content": answer}]
    model.load({"conversations": [{"match": question, "turns": turns}], "chunk_delay": 0.05})
    handle = await client.submit_agent("oai_helper", question)

    chunks = []
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
    spend = {"usage": {"prompt_tokens": 300, "completion_tokens": 200}}
    question = _load(
        model,
        {**_call("get_weather", city="Rome"), **spend},
        {"content": "Sunny.", **spend},
    )

    handle = await client.submit_agent("oai_helper", question, token_budget=520)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert "BudgetExceeded" in failed.value.error.type
    calls = [r for r in model.requests() if r["conversation"] == question]
    assert len(calls) == 1 and calls[0]["max_tokens"] is not None, calls
    assert calls[0]["max_tokens"] <= 520  # sent with the most the budget lets it answer
    record = await handle.get()
    assert record.usage is not None and record.usage.total_tokens == 500


async def test_an_approval_makes_the_task_wait_and_the_answer_resumes_it(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    question = _load(
        model,
        _call("get_weather", city=path),
        _call("read_clock", zone=path),
        _call("delete_file", path=path),
        {"content": "Deleted."},
    )
    handle = await client.submit_agent("oai_helper", question)

    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    assert waiting.input_request is not None and "delete_file" in waiting.input_request.prompt
    assert _ran(executions, f"delete_file {path}") == 0
    await client.send_input(handle.task_id, {"approved": True})

    assert await handle.wait(timeout=30) == "Deleted."
    assert _ran(executions, f"delete_file {path}") == 1
    assert _ran(executions, f"get_weather {path}") == 1  # journaled: read back on resume
    assert _ran(executions, f"read_clock {path}") == 2  # idempotent: runs again instead
    assert _turns(model, question) == {0: 1, 1: 1, 2: 1, 3: 1}  # none sent again
    calls = [r for r in model.requests() if r["conversation"] == question]
    assert calls[3]["tool_texts"][-1] == f"deleted {path}"
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 4


async def test_a_rejected_call_does_not_run_and_the_model_is_told_why(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    question = _load(model, _call("delete_file", path=path), {"content": "Not deleted."})
    handle = await client.submit_agent("oai_helper", question)

    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    await client.send_input(handle.task_id, {"approved": False, "reason": "keep it"})

    assert await handle.wait(timeout=30) == "Not deleted."
    assert _ran(executions, f"delete_file {path}") == 0
    calls = [r for r in model.requests() if r["conversation"] == question]
    assert calls[1]["tool_texts"] == ["keep it"]


async def test_a_handoff_and_a_sub_agent_run_durably_in_one_task(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    topic = f"topic-{uuid.uuid4().hex[:6]}"
    question = f"question {uuid.uuid4().hex[:8]}"
    triage = [
        _call("research", input=topic),
        _call("transfer_to_oai_specialist"),
        {"content": "The specialist answers."},
    ]
    sub = [_call("get_weather", city=topic), {"content": f"{topic} is sunny."}]
    conversations = [{"match": question, "turns": triage}, {"match": topic, "turns": sub}]
    model.load({"conversations": conversations})

    handle = await client.submit_agent("oai_triage", question)

    assert await handle.wait(timeout=30) == "The specialist answers."
    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}
    assert _turns(model, topic) == {0: 1, 1: 1}
    assert _ran(executions, f"get_weather {topic}") == 1
    calls = [r for r in model.requests() if r["conversation"] == question]
    assert calls[1]["tool_texts"] == [f"{topic} is sunny."]  # the sub-agent's answer
    assert calls[2]["system"] == "You handle billing."  # the specialist took over
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 5  # nested calls counted


async def test_the_drop_in_runner_journals_runs_a_tool_makes_itself(
    client: Client, worker: object, model: ScriptedModel, executions: Path
) -> None:
    text = f"text {uuid.uuid4().hex[:8]}"
    first = [_call("get_weather", city=text), {"content": "One."}]
    model.load(
        {
            "conversations": [
                {"match": f"{text} again", "turns": [{"content": "Two."}]},
                {"match": text, "turns": first},
            ]
        }
    )

    handle = await client.submit([{"tool": "summarize", "input": text}])

    assert await handle.wait(timeout=30) == "One. / Two."
    assert _ran(executions, f"get_weather {text}") == 1
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 3


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
    question = _load(
        model, _call("get_weather", city=city), {"content": "Sunny.", "faults": broken}
    )

    handle = await client.submit_agent("oai_helper", question)

    assert await handle.wait(timeout=60) == "Sunny."
    assert _ran(executions, f"get_weather {city}") == 1  # the retry read it back
    assert _turns(model, question) == {0: 1, 1: 4}  # the first turn was not sent again
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 2  # not 3: counted once
