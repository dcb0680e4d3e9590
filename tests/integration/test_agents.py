"""The agent loop through the real `openai` client against the scripted model (its own
process): parallel tool calls fan in, tokens stream and resume, approvals, usage and
budgets, and the model's errors mapped honestly."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.apps.tools import read_branch_executions
from tether import Client, TaskFailedError, TaskHandle, TaskStatus, Worker
from tether.nats.store import Store
from tether.schemas import StepCompleted
from tether.testing.llm import ScriptedModel


def _question() -> str:
    return f"question {uuid.uuid4().hex[:8]}"


async def _ask(
    client: Client,
    model: ScriptedModel,
    turns: list[dict[str, Any]],
    agent: str = "researcher",
    **options: Any,
) -> tuple[str, TaskHandle]:
    """A new question, the model's script for it, and the agent's task asking it."""
    question = _question()
    model.load(_script(question, *turns))
    return question, await client.submit_agent(agent, question, **options)


def _script(question: str, *turns: dict[str, Any]) -> dict[str, Any]:
    return {"conversations": [{"match": question, "turns": list(turns)}]}


def _calls(model: ScriptedModel, question: str) -> list[dict[str, Any]]:
    return [r for r in model.requests() if r["conversation"] == question]


SEARCH_TWICE = {
    "tool_calls": [
        {"name": "web_search", "arguments": {"query": "durable agents"}},
        {"name": "web_search", "arguments": {"query": "NATS JetStream"}},
    ],
    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 40},
}
ANSWER = {
    "content": "Durable agents checkpoint every step in JetStream.",
    "usage": {"prompt_tokens": 180, "completion_tokens": 9},
}


async def test_parallel_tool_calls_fan_in_to_the_next_turn_and_the_answer_is_the_result(
    client: Client,
    store: Store,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
    executions: Path,
) -> None:
    question, handle = await _ask(client, model, [SEARCH_TWICE, ANSWER])

    assert await handle.wait(timeout=30) == ANSWER["content"]
    calls = _calls(model, question)
    assert [(c["turn"], c["attempt"]) for c in calls] == [(0, 0), (1, 0)]  # each call once
    assert calls[1]["messages"] == 5  # system, user, assistant, two tool results
    assert set(calls[0]["tools"]) == {"web_search", "slow_search", "send_email", "shout"}
    branches = read_branch_executions(executions)
    assert sorted(b for (t, _, b), n in branches.items() if t == handle.task_id) == [0, 1]
    record = await handle.get()
    assert record.usage is not None
    assert (record.usage.input_tokens, record.usage.output_tokens) == (280, 29)
    assert (record.usage.cached_tokens, record.usage.requests) == (40, 2)
    group = await store.checkpoints.get(handle.task_id, 1)
    assert group is not None and group.output == [
        ["durable agents: result 1", "durable agents: result 2"],
        ["NATS JetStream: result 1", "NATS JetStream: result 2"],
    ]


async def test_usage_is_on_each_llm_steps_event(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    _, handle = await _ask(client, model, [SEARCH_TWICE, ANSWER])
    await handle.wait(timeout=30)

    events = [e async for e in handle.events(timeout=5)]

    used = [(e.step, e.usage) for e in events if isinstance(e, StepCompleted) and e.usage]
    assert [(step, usage.input_tokens) for step, usage in used] == [(0, 100), (2, 180)]


async def test_the_answer_streams_as_it_arrives_and_a_reader_resumes_without_repeats(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    _, handle = await _ask(client, model, [SEARCH_TWICE, ANSWER])
    await handle.wait(timeout=30)

    chunks = [chunk async for chunk in handle.stream()]
    first = [c async for c in _take(handle.stream(), 3)]
    rest = [c async for c in handle.stream(after=first[-1].stream_seq or 0)]

    text = "".join(c.delta for c in chunks)
    assert text == ANSWER["content"]
    assert len([c for c in chunks if c.delta]) > 1  # as it arrives, not one piece at the end
    assert all(c.step == 2 and c.attempt == 1 for c in chunks)
    assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].done
    assert [*first, *rest] == chunks  # nothing repeated, nothing lost


async def _take(stream: AsyncIterator[Any], n: int) -> AsyncIterator[Any]:
    async for item in stream:
        yield item
        n -= 1
        if n == 0:
            return


async def test_a_429_is_retried_after_the_providers_retry_after(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    limited = {**ANSWER, "faults": [{"status": 429, "retry_after": 1}]}
    question, handle = await _ask(client, model, [limited])

    assert await handle.wait(timeout=30) == ANSWER["content"]
    calls = _calls(model, question)
    assert [(c["attempt"], (c["fault"] or {}).get("status")) for c in calls] == [
        (0, 429),
        (1, None),
    ]
    waited = _at(calls[1]) - _at(calls[0])
    assert waited >= 0.9, waited  # Retry-After: 1, not the agent's 50 ms backoff


def _at(call: dict[str, Any]) -> float:
    return datetime.fromisoformat(call["time"]).timestamp()


async def test_a_string_tool_gets_its_input_unwrapped_and_an_unknown_tool_is_told_to_the_model(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    calls = {
        "tool_calls": [
            {"name": "shout", "arguments": {"input": "quiet"}},
            {"name": "teleport", "arguments": {}},
        ]
    }
    _, handle = await _ask(client, model, [calls, ANSWER])

    assert await handle.wait(timeout=30) == ANSWER["content"]
    group = await store.checkpoints.get(handle.task_id, 1)
    assert group is not None and group.output == ["QUIET"]  # one branch: teleport never ran
    turn = await store.checkpoints.get(handle.task_id, 0)
    assert turn is not None and "no tool named 'teleport'" in turn.output["results"]["call_0_1"]


async def test_a_denied_call_is_not_run_and_the_model_is_told_why(
    client: Client,
    store: Store,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
    executions: Path,
) -> None:
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ceo@example.com"}}]}
    _, handle = await _ask(client, model, [email, ANSWER])

    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    assert waiting.input_request is not None
    assert "send_email" in waiting.input_request.prompt
    assert "ceo@example.com" in waiting.input_request.prompt
    await handle.send_input({"approved": False, "reason": "not today"})

    assert await handle.wait(timeout=30) == ANSWER["content"]
    assert "send_email" not in executions.read_text()
    turn = await store.checkpoints.get(handle.task_id, 2)
    assert turn is not None and turn.output["results"] == {
        "call_0_0": "The user denied this tool call: not today"
    }


async def test_an_approved_call_runs_once(
    client: Client,
    store: Store,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
    executions: Path,
) -> None:
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "team@example.com"}}]}
    _, handle = await _ask(client, model, [email, ANSWER])
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)

    await handle.send_input({"approved": True})

    assert await handle.wait(timeout=30) == ANSWER["content"]
    assert executions.read_text().count("send_email") == 1
    group = await store.checkpoints.get(handle.task_id, 3)
    assert group is not None and group.output == ["sent to team@example.com"]


async def test_max_turns_fails_the_task_with_what_to_do(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    again = {"tool_calls": [{"name": "shout", "arguments": {"input": "again"}}]}
    question, handle = await _ask(client, model, [*[again] * 6, ANSWER])

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=60)
    assert failed.value.error.type == "MaxTurnsExceeded"
    assert "within 6 turns" in failed.value.error.message
    assert len(_calls(model, question)) == 6


async def test_a_context_length_error_fails_the_task_and_says_what_to_do(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    too_long = {**ANSWER, "faults": [{"status": 400, "code": "context_length_exceeded"}]}
    question, handle = await _ask(client, model, [too_long])

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error.type == "ContextLengthExceeded"
    assert "lower max_turns" in failed.value.error.message
    assert len(_calls(model, question)) == 1  # not retried: it cannot pass


async def test_an_approval_nobody_answers_expires_by_its_timer(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "anything"}}]}
    _, handle = await _ask(client, model, [search, ANSWER], agent="hasty")

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error.type == "InputExpired"
    assert "web_search" not in executions.read_text()  # listed in approval=[...]: never ran
