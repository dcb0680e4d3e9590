"""What the model said is what is stored: a stream cut off cleanly is sent again, a reply
cut at the token limit or by a filter is an error, and tool calls with empty or repeated
ids are each run and answered under ids of their own (real `openai` client, scripted
model in its own process)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.apps.agents import MODEL, QUICK
from tests.apps.agents import app as agents
from tests.apps.tools import app as tools
from tests.apps.tools import read_branch_executions
from tests.conftest import Raw
from tether import (
    Agent,
    App,
    Client,
    Dispatcher,
    NatsConfig,
    TaskExistsError,
    TaskFailedError,
    TaskHandle,
    Worker,
)
from tether.clock import utcnow
from tether.nats.cleanup import Cleanup
from tether.nats.layout import Layout
from tether.nats.store import Store
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

ANSWER = "Durable agents keep their state outside the process, so a crash loses nothing."


async def _ask(
    client: Client, model: ScriptedModel, *turns: dict[str, Any]
) -> tuple[str, TaskHandle]:
    question = f"question {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": question, "turns": list(turns)}]})
    return question, await client.submit_agent("researcher", question)


def _calls(model: ScriptedModel, question: str) -> list[dict[str, Any]]:
    return [r for r in model.requests() if r["conversation"] == question]


async def test_a_stream_that_ends_cleanly_without_a_finish_reason_is_sent_again(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
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
            "the server's own limit stopped it",
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
    agent_worker: Worker,
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


async def test_a_truncated_answer_names_the_max_tokens_the_run_sent(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """The limit named is the one that applied: `max_tokens` from the run's
    `model_settings`, with its value, not a `max_completion_tokens` nobody set."""
    question = f"question {uuid.uuid4().hex[:8]}"
    cut = {"content": "Durable agents keep", "finish_reason": "length"}
    model.load({"conversations": [{"match": question, "turns": [cut]}]})
    handle = await client.submit_agent("researcher", question, model_settings={"max_tokens": 7})

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and error.type == "ModelOutputTruncated"
    assert "max_tokens=7 (from the run's model_settings)" in error.message
    assert "max_completion_tokens" not in error.message


async def test_an_answer_cut_where_the_budget_capped_it_names_the_budget(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """A budget with room for less than the call asks sends that room as `max_tokens`:
    an answer cut there is the budget's doing, not a `model_settings` nobody set."""
    question = f"question {uuid.uuid4().hex[:8]}"
    cut = {"content": "Durable agents keep", "finish_reason": "length"}
    model.load({"conversations": [{"match": question, "turns": [cut]}]})
    handle = await client.submit_agent("researcher", question, token_budget=900)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and error.type == "ModelOutputTruncated"
    assert "the task's token budget had room for" in error.message
    assert "model_settings)" not in error.message
    assert 0 < _calls(model, question)[0]["max_tokens"] < 900  # the budget's room, sent


@pytest.mark.parametrize("ids", [["dup", "dup"], ["", ""]])
async def test_tool_calls_with_repeated_or_empty_ids_each_run_and_get_their_own_result(
    client: Client,
    dispatcher: object,
    agent_worker: Worker,
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
        await Cleanup(client._store).remove_task("reused")  # as `tether gc` does
        second = await _submit_once_free(client, new, "reused")
        assert await second.wait(timeout=30) == "the new answer"
    assert [(c["turn"], c["attempt"]) for c in _calls(model, new)] == [(0, 0), (1, 0)]


async def _submit_once_free(client: Client, question: str, task_id: str) -> TaskHandle:
    """Submit under an id `gc` removed: refused, saying when it is free, until it is."""
    deadline = utcnow() + timedelta(seconds=30)
    while True:
        try:
            return await client.submit_agent("researcher", question, task_id=task_id)
        except TaskExistsError as exc:
            assert exc.free_at is not None and "free again at" in str(exc)
            assert utcnow() < deadline, "the removed id was never free again"
            await asyncio.sleep(0.1)


async def test_an_id_gc_removed_is_held_back_for_the_duplicate_window_not_hung(
    client: Client, store: Store, dispatcher: object, config: NatsConfig, raw: Raw
) -> None:
    """Its messages' ids are remembered for the duplicate window, so a new task under it
    would have its steps dropped as repeats and hang: the SDK refuses it saying when the
    id is free, and a raw submission is dead-lettered saying the same."""
    handle = await client.submit(["fast"], task_id="gone-soon")
    async with Worker(tools, config):
        await handle.wait(timeout=30)
    await Cleanup(store).remove_task("gone-soon")

    with pytest.raises(TaskExistsError) as refused:
        await client.submit(["fast"], task_id="gone-soon")
    free_at = refused.value.free_at
    assert free_at is not None
    held_back = 2 * timedelta(minutes=2)  # twice the layout's default duplicate window
    assert abs((free_at - utcnow()) - held_back) < timedelta(seconds=10)

    body = {"task_id": "gone-soon", "steps": [{"tool": "fast"}]}
    await raw.nc.publish(
        config.names.submit_subject("gone-soon"), msgspec.json.encode(body)
    )  # no msg id

    async def dead_lettered() -> str:
        letters = await client.dead_letters()
        assert len(letters) == 1
        return letters[0].error.message

    assert "free again at" in await eventually(dead_lettered)
    assert await client.find("gone-soon") is None  # nothing recorded to hang


async def test_rate_limits_are_waited_out_in_place_without_spending_attempts(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """Nine 429s in a row (the agent allows 4 attempts) still end in the answer, each
    after the provider's Retry-After, within one attempt of the step."""
    limited = [{"status": 429, "retry_after": 0.05}] * 9
    question, handle = await _ask(client, model, {"content": ANSWER, "faults": limited})

    assert await handle.wait(timeout=30) == ANSWER
    assert len(_calls(model, question)) == 10
    events = [e async for e in handle.events()]
    assert not [e for e in events if e.kind == "step_retrying"]
    assert {e.attempt for e in events if e.kind == "step_started"} == {1}


async def test_insufficient_quota_fails_at_once_naming_billing(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    quota = {"status": 429, "code": "insufficient_quota", "message": "You exceeded your quota"}
    question, handle = await _ask(client, model, {"content": ANSWER, "faults": [quota]})

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error is not None and failed.value.error.type == "ModelQuotaExceeded"
    assert "billing" in failed.value.error.message
    assert len(_calls(model, question)) == 1


async def test_a_lone_surrogate_in_the_answer_is_stored_as_a_replacement_character(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """Encoding it would fail every attempt the same way; a pair split across two chunks
    is put back together."""
    text = "smile \\ud83d\\ude00 and a lone \\ud800 here"
    question, handle = await _ask(client, model, {"content": text, "raw_escapes": True})

    assert await handle.wait(timeout=30) == "smile \U0001f600 and a lone \ufffd here"
    assert len(_calls(model, question)) == 1


async def test_an_empty_reply_is_sent_again(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question, handle = await _ask(client, model, {"content": ANSWER, "faults": [{"empty": True}]})

    assert await handle.wait(timeout=30) == ANSWER
    assert [(c["turn"], c["attempt"]) for c in _calls(model, question)] == [(0, 0), (0, 1)]


async def test_a_tool_raising_terminal_error_stops_the_agent(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    """Other exceptions are told to the model; TerminalError fails the task, as it does
    for any tool (README: "Raise `TerminalError` to fail the task now")."""
    question = f"close {uuid.uuid4().hex[:8]}"
    close = {"tool_calls": [{"name": "close_account", "arguments": {"account": "a-1"}}]}
    model.load({"conversations": [{"match": question, "turns": [close, {"content": ANSWER}]}]})
    handle = await client.submit_agent("guarded", question)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error is not None and failed.value.error.type == "TerminalError"
    assert "frozen" in failed.value.error.message
    assert len(_calls(model, question)) == 1  # the model was not asked again


async def test_a_budget_with_a_model_that_reports_no_usage_is_warned_about_once(
    client: Client,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    nothing = {"prompt_tokens": 0, "completion_tokens": 0}
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}]}
    question = f"unmetered {uuid.uuid4().hex[:8]}"
    turns = [{**search, "usage": nothing}, {"content": ANSWER, "usage": nothing}]
    model.load({"conversations": [{"match": question, "turns": turns}]})
    caplog.set_level(logging.WARNING, logger="tether.agents")
    handle = await client.submit_agent("guarded", question)

    assert await handle.wait(timeout=30) == ANSWER
    warned = [r for r in caplog.records if "reports no token usage" in r.getMessage()]
    assert len(warned) == 1 and handle.task_id in warned[0].getMessage()


def _limited(max_turns: int) -> App:
    """The same agent, as deployed before and after raising its `max_turns`."""
    app = App(f"limited-{max_turns}")
    app.add(Agent("limited", model=MODEL, tools=["web_search"], max_turns=max_turns, retry=QUICK))
    return app


async def test_max_turns_exceeded_advice_works_raise_it_restart_and_retry(
    config: NatsConfig, client: Client, dispatcher: object, model: ScriptedModel
) -> None:
    """The advice MaxTurnsExceeded gives: raise max_turns, restart the workers, then
    retry the task. The retry keeps every turn so far and sends none of them again."""
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}]}
    question = f"long {uuid.uuid4().hex[:8]}"
    turns = [search, search, search, {"content": ANSWER}]
    model.load({"conversations": [{"match": question, "turns": turns}]})

    async with Worker([agents, _limited(2)], config):
        handle = await client.submit_agent("limited", question)
        with pytest.raises(TaskFailedError) as failed:
            await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and error.type == "MaxTurnsExceeded"
    assert "raise max_turns" in error.message and "tether dlq retry" in error.message

    async with Worker([agents, _limited(5)], config):
        retried = await client.retry(handle.task_id)
        assert await retried.wait(timeout=30) == ANSWER
    sent = Counter(c["turn"] for c in _calls(model, question))
    assert sent == {0: 1, 1: 1, 2: 1, 3: 1}  # two turns kept, none sent again
