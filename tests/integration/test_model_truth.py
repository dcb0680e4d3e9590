"""What the model said is what is stored: a stream cut off cleanly is sent again, a reply
cut at the token limit or by a filter is an error, and tool calls with empty or repeated
ids are each run and answered under ids of their own (real `openai` client, scripted
model in its own process)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.apps.agents import app as agents
from tests.apps.tools import read_branch_executions
from tether import Client, Dispatcher, NatsConfig, TaskFailedError, TaskHandle, Worker
from tether.clock import utcnow
from tether.nats.cleanup import Cleanup
from tether.nats.layout import Layout
from tether.testing.llm import ScriptedModel

ANSWER = "Durable agents keep their state outside the process, so a crash loses nothing."


@pytest.fixture
async def worker(config: NatsConfig, model: ScriptedModel) -> AsyncIterator[Worker]:
    async with Worker(agents, config) as w:
        yield w


async def _ask(
    client: Client, model: ScriptedModel, *turns: dict[str, Any]
) -> tuple[str, TaskHandle]:
    question = f"question {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": question, "turns": list(turns)}]})
    return question, await client.submit_agent("researcher", question)


def _calls(model: ScriptedModel, question: str) -> list[dict[str, Any]]:
    return [r for r in model.requests() if r["conversation"] == question]


async def test_a_stream_that_ends_cleanly_without_a_finish_reason_is_sent_again(
    client: Client, dispatcher: object, worker: Worker, model: ScriptedModel
) -> None:
    cut = {"content": ANSWER, "faults": [{"end_after": 6}]}  # a proxy ends the body early
    question, handle = await _ask(client, model, cut)

    assert await handle.wait(timeout=30) == ANSWER
    assert [(c["turn"], c["attempt"]) for c in _calls(model, question)] == [(0, 0), (0, 1)]
    record = await handle.get()
    assert record.usage is not None and record.usage.output_tokens > 0


@pytest.mark.parametrize(
    ("turn", "error", "advice"),
    [
        (
            {"content": "Durable agents keep", "finish_reason": "length"},
            "ModelOutputTruncated",
            "max_completion_tokens",
        ),
        (
            {
                "tool_calls": [{"name": "web_search", "arguments": '{"query": "dur'}],
                "finish_reason": "length",
            },
            "ModelOutputTruncated",
            "arguments of tool call",
        ),
        (
            {"content": "", "finish_reason": "content_filter"},
            "ModelContentFiltered",
            "content filter",
        ),
    ],
)
async def test_a_reply_cut_at_the_token_limit_or_by_a_filter_fails_the_step_saying_so(
    client: Client,
    dispatcher: object,
    worker: Worker,
    model: ScriptedModel,
    turn: dict[str, Any],
    error: str,
    advice: str,
) -> None:
    question, handle = await _ask(client, model, turn)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error is not None and failed.value.error.type == error
    assert advice in failed.value.error.message
    assert len(_calls(model, question)) == 1  # not retried: sending it again gives the same


@pytest.mark.parametrize("ids", [["dup", "dup"], ["", ""]])
async def test_tool_calls_with_repeated_or_empty_ids_each_run_and_get_their_own_result(
    client: Client,
    dispatcher: object,
    worker: Worker,
    model: ScriptedModel,
    executions: Path,
    ids: list[str],
) -> None:
    searches = {
        "tool_calls": [
            {"name": "web_search", "arguments": {"query": "first"}, "id": ids[0]},
            {"name": "web_search", "arguments": {"query": "second"}, "id": ids[1]},
        ]
    }
    question, handle = await _ask(client, model, searches, {"content": ANSWER})

    assert await handle.wait(timeout=30) == ANSWER
    branches = read_branch_executions(executions)
    assert sorted(b for (t, _, b), n in branches.items() if t == handle.task_id and n) == [0, 1]
    answered = _calls(model, question)[1]["tool_results"]
    assert len(answered) == 2 and len(set(answered)) == 2 and all(answered)


async def test_a_task_id_used_again_after_gc_never_gets_the_old_tasks_conversation(
    config: NatsConfig, model: ScriptedModel, executions: Path
) -> None:
    """A worker keeps recent conversations in memory; once `gc` removed a task, a new task
    under its id must start from its own question, not the old one's."""
    layout = Layout(names=config.names, duplicate_window=timedelta(seconds=1))
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}]}
    old, new = "old question " + uuid.uuid4().hex[:6], "new question " + uuid.uuid4().hex[:6]
    model.load(
        {
            "conversations": [
                {"match": old, "turns": [search, {"content": "the old answer"}]},
                {"match": new, "turns": [search, {"content": "the new answer"}]},
            ]
        }
    )
    async with (
        Client(config, layout=layout) as client,
        Dispatcher(config, layout=layout),
        Worker(agents, config, layout=layout),  # one worker: one in-memory cache
    ):
        first = await client.submit_agent("researcher", old, task_id="reused")
        assert await first.wait(timeout=30) == "the old answer"
        ended = (await first.get()).updated_at  # after its last message was published
        await Cleanup(client._store).remove_task("reused")  # as `tether gc` does
        # A timer, not a condition: the id is free once the duplicate window has passed.
        free_at = ended + layout.duplicate_window + timedelta(seconds=0.2)
        await asyncio.sleep(max(0.0, (free_at - utcnow()).total_seconds()))

        second = await client.submit_agent("researcher", new, task_id="reused")
        assert await second.wait(timeout=30) == "the new answer"
    assert [(c["turn"], c["attempt"]) for c in _calls(model, new)] == [(0, 0), (1, 0)]

