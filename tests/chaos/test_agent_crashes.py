"""An agent's worker killed (SIGKILL) after an LLM turn is checkpointed, in the middle of
its tool calls' fan-out, and in the middle of a streamed reply. Only what was in flight
runs again: a finished LLM call is never sent again, a finished tool call never re-runs."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.apps.agents import app as agents
from tests.apps.tools import read_branch_executions
from tests.chaos.crashes import crash, survive
from tests.conftest import start_worker
from tether import Client, NatsConfig, TokenChunk, Worker
from tether.schemas import StepStarted
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow
AGENTS = "tests.apps.agents:app"
FAN_OUT = {
    "tool_calls": [
        {"name": "web_search", "arguments": {"query": "fast"}},
        {"name": "slow_search", "arguments": {"query": "slow"}},
    ]
}
ANSWER = {"content": "Both searches agree: durable steps survive crashes."}


@pytest.fixture
async def registered(config: NatsConfig) -> None:
    """The agent and its tools registered, with no worker left running."""
    async with Worker(agents, config):
        pass


def _turns(model: ScriptedModel, question: str) -> Counter[int]:
    """LLM calls sent per turn."""
    return Counter(r["turn"] for r in model.requests() if r["conversation"] == question)


@pytest.mark.parametrize(
    "point",
    [
        "checkpointed:0",  # turn 1's reply stored; the record not moved, nothing handed off
        "handed-off:0",  # the tool calls published; turn 1's message not acked
        "checkpointed:1.b0",  # mid fan-out: one call stored, the slow one still running
    ],
)
async def test_a_crash_in_an_agent_reruns_only_what_was_in_flight(
    point: str,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where, _, step = point.partition(":")
    task_id = f"agent-{where}-{step.replace('.', '-')}"
    model.load({"conversations": [{"match": task_id, "turns": [FAN_OUT, ANSWER]}]})
    handle = await client.submit_agent("researcher", task_id, task_id=task_id)
    await crash(config, f"{where}:{task_id}:{step}", tmp_path, monkeypatch, AGENTS)

    result = await survive(config, handle, AGENTS)

    assert result == ANSWER["content"]
    assert _turns(model, task_id) == {0: 1, 1: 1}  # no LLM call sent twice
    branches = read_branch_executions(executions)
    assert branches[(task_id, 1, 0)] == 1  # web_search: checkpointed before any crash point
    assert 1 <= branches[(task_id, 1, 1)] <= 2  # slow_search: may have been in flight


@pytest.mark.parametrize("point", ["checkpointed:0", "checkpointed:1.b0"])
async def test_a_crash_in_a_follow_up_reruns_only_what_was_in_flight(
    point: str,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where, _, step = point.partition(":")
    task_id = f"follow-{where}-{step.replace('.', '-')}"
    question = f"thread of {task_id}"
    first = {"content": "A first answer."}
    model.load({"conversations": [{"match": question, "turns": [first, FAN_OUT, ANSWER]}]})
    earlier = await client.submit_agent("researcher", question)
    assert await survive(config, earlier, AGENTS) == first["content"]

    handle = await client.continue_agent(earlier.task_id, "Search both.", new_task_id=task_id)
    await crash(config, f"{where}:{task_id}:{step}", tmp_path, monkeypatch, AGENTS)
    result = await survive(config, handle, AGENTS)

    assert result == ANSWER["content"]
    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}  # no LLM call sent twice
    branches = read_branch_executions(executions)
    assert branches[(task_id, 1, 0)] == 1
    assert 1 <= branches[(task_id, 1, 1)] <= 2  # slow_search: may have been in flight
    calls = [r for r in model.requests() if r["conversation"] == question]
    assert calls[2]["messages"] == 7  # system, both questions, the first answer, the fan-out


@pytest.mark.parametrize("point", ["checkpointed:2", "checkpointed:1.b0"])
async def test_a_message_sent_before_a_crash_reaches_the_model_once(
    point: str,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed after the turn that took the message was stored, or in the
    middle of the tool call before it: the model hears the message once."""
    where, _, step = point.partition(":")
    task_id = f"steer-{where}-{step.replace('.', '-')}"
    slow = {"tool_calls": [{"name": "slow_search", "arguments": {"query": "slow"}}]}
    model.load({"conversations": [{"match": task_id, "turns": [slow, ANSWER]}]})
    handle = await client.submit_agent("researcher", task_id, task_id=task_id)
    crashed = asyncio.create_task(
        crash(config, f"{where}:{task_id}:{step}", tmp_path, monkeypatch, AGENTS)
    )
    async for event in handle.events(timeout=20):  # the slow tool call is running
        if isinstance(event, StepStarted) and event.step == 1:
            break
    await client.send_message(task_id, "Prefer primary sources.")
    await crashed

    result = await survive(config, handle, AGENTS)

    assert result == ANSWER["content"]
    calls = [r for r in model.requests() if r["conversation"] == task_id]
    assert [c["turn"] for c in calls] == [0, 1]  # no LLM call sent twice
    assert calls[1]["messages"] == 5  # system, question, call, result, the message once
    assert calls[1]["last"] == {"role": "user", "text": "Prefer primary sources."}


@pytest.mark.parametrize(
    "point",
    [
        "checkpointed:{lead}-s1b0:0",  # the sub-agent's first turn stored, not handed on
        "checkpointed:{lead}-s1b0-s1b0:1.b0",  # mid fan-out in the sub-sub-agent
    ],
)
async def test_a_crash_inside_a_sub_agent_tree_reruns_only_what_was_in_flight(
    point: str,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lead = f"tree-{point.count('s1b0')}"
    middle, inner = f"analyse {lead}", f"research {lead}"
    conversations = [  # the most specific match first: each question holds the lead's
        {"match": inner, "turns": [FAN_OUT, ANSWER]},
        {"match": middle, "turns": [_ask("researcher", inner), {"content": "Analysis."}]},
        {"match": lead, "turns": [_ask("analyst", middle), {"content": "Lead."}]},
    ]
    model.load({"conversations": conversations})
    handle = await client.submit_agent("lead", lead, task_id=lead)
    await crash(config, point.format(lead=lead), tmp_path, monkeypatch, AGENTS)

    result = await survive(config, handle, AGENTS)

    assert result == "Lead."
    for question in (lead, middle, inner):
        assert _turns(model, question) == {0: 1, 1: 1}, question  # no LLM call twice
    researcher = f"{lead}-s1b0-s1b0"
    branches = read_branch_executions(executions)
    assert branches[(researcher, 1, 0)] == 1
    assert 1 <= branches[(researcher, 1, 1)] <= 2  # slow_search: may have been in flight
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 6  # the tree's calls


def _ask(agent: str, question: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": agent, "arguments": {"input": question}}]}


async def test_a_crash_mid_stream_marks_the_cut_off_attempt_and_the_next_one_completes(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    question = "agent-mid-stream"
    stalls = {**ANSWER, "faults": [{"stall_after": 3, "seconds": 60}]}
    model.load({"conversations": [{"match": question, "turns": [stalls]}]})
    doomed = start_worker(config, AGENTS, log=tmp_path / "doomed.log")
    handle = await client.submit_agent("researcher", question)
    chunks: list[TokenChunk] = []
    stream = handle.stream()
    async for chunk in stream:  # the first attempt's three words, then the stall
        chunks.append(chunk)
        if len("".join(c.delta for c in chunks).split()) == 3:
            break
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()

    result = await survive(config, handle, AGENTS)
    chunks += [c async for c in handle.stream(after=chunks[-1].stream_seq or 0)]

    assert result == ANSWER["content"]
    attempts = {c.attempt for c in chunks}
    assert attempts == {1, 2}
    cut_off = [c for c in chunks if c.attempt == 1]
    words = ANSWER["content"].split()[:3]
    assert "".join(c.delta for c in cut_off).split() == words  # in one chunk or several
    assert not any(c.done for c in cut_off)
    final = [c for c in chunks if c.attempt == 2]
    assert "".join(c.delta for c in final) == ANSWER["content"] and final[-1].done
    assert _text(chunks) == ANSWER["content"]  # what a reader shows once attempts are merged
    assert _turns(model, question) == {0: 2}  # the call in flight, sent again once


def _text(chunks: list[TokenChunk]) -> str:
    """A reader's text: a later attempt of a step replaces what the earlier one wrote."""
    latest: dict[tuple[int, Any], int] = {}
    for chunk in chunks:
        key = (chunk.step, chunk.branch)
        latest[key] = max(latest.get(key, 0), chunk.attempt)
    return "".join(c.delta for c in chunks if c.attempt == latest[(c.step, c.branch)])
