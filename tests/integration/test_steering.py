"""Steering a running agent (`send_message`, `update_agent`) through the real `openai`
client and the scripted model: what is told reaches the next LLM call once, in order, is
recorded as events, and a crash does not tell it twice."""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgspec
import pytest

from tests.conftest import Raw
from tests.e2e.test_cli_ops import tether
from tether import Client, NatsConfig, TaskConflictError, TaskHandle, TaskStatus, Worker
from tether.nats.store import Store
from tether.schemas import StepStarted
from tether.schemas.events import AgentUpdated, MessageSent
from tether.testing.llm import ScriptedModel

SLOW = {"tool_calls": [{"name": "slow_search", "arguments": {"query": "durable"}}]}
ANSWER = {"content": "Steered, and answered."}


async def _while_the_tool_runs(handle: TaskHandle) -> None:
    """Returns once the slow tool call (step 1) has started."""
    async for event in handle.events(timeout=15):
        if isinstance(event, StepStarted) and event.step == 1:
            return


async def test_messages_sent_mid_run_reach_the_next_call_once_in_order(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    questions = [f"steer {uuid.uuid4().hex[:8]}" for _ in range(2)]
    turns = [SLOW, ANSWER]
    model.load({"conversations": [{"match": q, "turns": turns} for q in questions]})
    handle, other = [await client.submit_agent("researcher", q) for q in questions]
    await _while_the_tool_runs(handle)
    await _while_the_tool_runs(other)

    await client.send_message(handle.task_id, "Focus on NATS.")
    await client.send_message(handle.task_id, "And keep it short.", message_id="m2")
    await client.send_message(handle.task_id, "And keep it short.", message_id="m2")  # a repeat
    await client.send_message(other.task_id, "Another task's m2.", message_id="m2")  # its own

    assert await handle.wait(timeout=30) == ANSWER["content"]
    calls = model.requests(questions[0])
    assert [(c["turn"], c["attempt"]) for c in calls] == [(0, 0), (1, 0)]  # no call twice
    # system, question, the tool call, its result, then the two messages once each
    assert calls[1]["messages"] == 6
    assert calls[1]["last"] == {"role": "user", "text": "And keep it short."}
    events = [e async for e in handle.events(timeout=5)]
    told = [e.text for e in events if isinstance(e, MessageSent)]
    assert told == ["Focus on NATS.", "And keep it short."]
    assert await other.wait(timeout=30) == ANSWER["content"]
    assert model.requests(questions[1])[1]["last"]["text"] == "Another task's m2."


async def test_an_update_changes_model_instructions_and_budget_from_the_next_call(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(SLOW, ANSWER)
    handle = await client.submit_agent("researcher", question, token_budget=5_000)  # one call
    await _while_the_tool_runs(handle)

    await client.update_agent(
        handle.task_id, model="scripted-large", instructions="Be brief.", token_budget=100_000
    )

    assert await handle.wait(timeout=30) == ANSWER["content"]  # the raised budget held
    first, second = model.requests(question)
    assert (first["model"], second["model"]) == ("scripted", "scripted-large")
    assert first["system"] == "You research questions with the tools you have."
    assert second["system"] == "Be brief." and second["messages"] == 4  # one system message
    events = [e async for e in handle.events(timeout=5)]
    (updated,) = [e for e in events if isinstance(e, AgentUpdated)]
    assert (updated.model, updated.token_budget) == ("scripted-large", 100_000)
    ledger = await store.checkpoints.entry(f"{handle.task_id}.budget")
    assert ledger is not None and msgspec.json.decode(ledger[0])["tokens"] == 100_000


async def test_a_message_sent_while_the_agent_answers_gets_an_answer_of_its_own(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    long = {"content": " ".join(f"word{n}" for n in range(40))}
    question = model.conversation(long, ANSWER, chunk_delay=0.05)
    handle = await client.submit_agent("researcher", question)
    async for chunk in handle.stream():
        if chunk.delta:
            break  # the answer is streaming

    await client.send_message(handle.task_id, "One more thing.")

    assert await handle.wait(timeout=30) == ANSWER["content"]
    calls = model.requests(question)
    assert [c["turn"] for c in calls] == [0, 1]
    assert calls[1]["last"] == {"role": "user", "text": "One more thing."}
    assert calls[1]["messages"] == 4  # system, question, the first answer, the message


async def test_only_a_running_agent_task_can_be_told_anything(
    client: Client,
    store: Store,
    raw: Raw,
    api: object,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    question = model.conversation(ANSWER)
    done = await client.submit_agent("researcher", question)
    await done.wait(timeout=30)
    with pytest.raises(TaskConflictError, match="follow-up instead"):
        await client.send_message(done.task_id, "Too late.")
    plain = await client.submit([{"tool": "slow_search", "input": {"query": "q"}}] * 10)
    with pytest.raises(TaskConflictError, match="runs no agent"):
        await client.update_agent(plain.task_id, model="other")

    async def ask(verb: str, body: dict[str, Any]) -> dict[str, Any]:
        subject = store.names.api_subject(verb)
        reply = await raw.nc.request(subject, json.dumps(body).encode(), timeout=10)
        answer: dict[str, Any] = json.loads(reply.data)
        return answer

    refused = await ask("message", {"task_id": done.task_id, "text": "late"})
    assert refused["error"]["code"] == "conflict"
    ghost = await ask("update_agent", {"task_id": "ghost", "model": "x"})
    assert ghost["error"]["code"] == "not_found"
    empty = await ask("update_agent", {"task_id": done.task_id})
    assert empty["error"]["code"] == "invalid" and "give model" in empty["error"]["message"]


async def test_the_api_verbs_steer_a_running_agent(
    config: NatsConfig,
    client: Client,
    api: object,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    question = model.conversation(SLOW, ANSWER)
    handle = await client.submit_agent("researcher", question)
    await _while_the_tool_runs(handle)
    remote = Client(config, act_through_api=True)  # as the dashboard and gateway do

    async with remote:
        await remote.update_agent(handle.task_id, instructions="Answer in French.")
        await remote.send_message(handle.task_id, "Use NATS sources.")

    assert await handle.wait(timeout=30) == ANSWER["content"]
    second = model.requests(question)[1]
    assert second["system"] == "Answer in French."
    assert second["last"] == {"role": "user", "text": "Use NATS sources."}


async def test_the_cli_steers_and_watch_shows_what_was_told(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ops"}}]}
    question = model.conversation(email, ANSWER)
    handle = await client.submit_agent("researcher", question)
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=15)  # approval

    told = await tether(config, "message", handle.task_id, "Cite", "the", "spec.")
    updated = await tether(config, "update-agent", handle.task_id, "--model", "scripted-mini")
    await client.send_input(handle.task_id, {"approved": True})

    assert told.code == 0 and updated.code == 0, told.err + updated.err
    assert await handle.wait(timeout=30) == ANSWER["content"]
    second = model.requests(question)[1]
    assert second["last"]["text"] == "Cite the spec." and second["model"] == "scripted-mini"
    watched = await tether(config, "watch", handle.task_id)
    assert "message_sent" in watched.out and "'Cite the spec.'" in watched.out
    assert "agent_updated" in watched.out and "model scripted-mini" in watched.out
