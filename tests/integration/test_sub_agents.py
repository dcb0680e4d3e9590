"""Sub-agents: an agent that lists other agents among its tools calls each as a child task
(its own events, stream and usage, linked to the parent, cancelled with it), through the
real `openai` client and the scripted model; the parent's usage includes its children's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.apps.tools import read_branch_executions
from tether import Client, TaskStatus, Worker
from tether.testing import eventually
from tether.testing.llm import ScriptedModel


def _call(tool: str, text: str) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": tool, "arguments": {"input": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }


def _answer(text: str) -> dict[str, Any]:
    return {"content": text, "usage": {"prompt_tokens": 10, "completion_tokens": 1}}


def _tree(
    tag: str, research: list[dict[str, Any]], inner_agent: str = "researcher"
) -> tuple[str, dict[str, Any]]:
    """lead -> analyst -> researcher: a question and the script of all three."""
    question, middle, inner = f"lead {tag}", f"analyse {tag}", f"research {tag}"
    conversations = [
        {"match": question, "turns": [_call("analyst", middle), _answer("The lead's answer.")]},
        {"match": middle, "turns": [_call(inner_agent, inner), _answer("The analysis.")]},
        {"match": inner, "turns": research},
    ]
    return question, {"conversations": conversations}


async def test_a_tree_of_depth_two_runs_as_child_tasks_and_sums_its_usage(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    tag = uuid.uuid4().hex[:8]
    search = {
        "tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }
    question, script = _tree(tag, [search, _answer("The research.")])
    model.load(script)

    handle = await client.submit_agent("lead", question)

    assert await handle.wait(timeout=60) == "The lead's answer."
    record = await handle.get()
    calls = [r for r in model.requests() if tag in r["conversation"]]
    assert sorted((r["conversation"].split()[0], r["turn"], r["attempt"]) for r in calls) == [
        ("analyse", 0, 0),
        ("analyse", 1, 0),
        ("lead", 0, 0),
        ("lead", 1, 0),
        ("research", 0, 0),
        ("research", 1, 0),
    ]  # every LLM call once
    assert record.usage is not None
    assert (record.usage.requests, record.usage.input_tokens) == (6, 60)  # the whole tree
    (analyst_id,) = record.children
    analyst = await client.get(analyst_id)
    assert analyst.parent is not None and analyst.parent.task_id == handle.task_id
    assert analyst.status is TaskStatus.COMPLETED and analyst.result == "The analysis."
    assert analyst.usage is not None and analyst.usage.requests == 4
    (researcher_id,) = analyst.children
    researcher = await client.get(researcher_id)
    assert researcher.result == "The research." and researcher.usage is not None
    assert researcher.usage.requests == 2
    streamed = "".join([c.delta async for c in client.handle(researcher_id).stream()])
    assert streamed == "The research."  # its own token stream


async def test_cancelling_the_parent_cancels_the_whole_tree(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    tag = uuid.uuid4().hex[:8]
    slow = {"tool_calls": [{"name": "slow_search", "arguments": {"query": "q"}}]}
    question, script = _tree(tag, [slow, _answer("never")])
    model.load(script)
    handle = await client.submit_agent("lead", question)

    async def deepest() -> str:
        lead = await handle.get()
        assert lead.children
        analyst = await client.get(lead.children[0])
        assert analyst.children
        return analyst.children[0]

    researcher_id = await eventually(deepest, timeout=30)
    await client.cancel(handle.task_id)

    async def all_cancelled() -> None:
        lead = await handle.get()
        analyst = await client.get(lead.children[0])
        researcher = await client.get(researcher_id)
        statuses = {lead.status, analyst.status, researcher.status}
        assert statuses == {TaskStatus.CANCELLED}, statuses

    await eventually(all_cancelled, timeout=30)


async def test_a_sub_agent_that_fails_is_told_to_its_parent_which_answers(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    tag = uuid.uuid4().hex[:8]
    freeze = {"tool_calls": [{"name": "close_account", "arguments": {"account": "a1"}}]}
    question, script = _tree(tag, [freeze], inner_agent="guarded")
    model.load(script)

    handle = await client.submit_agent("lead", question)

    assert await handle.wait(timeout=60) == "The lead's answer."
    analyse_turn_1 = next(
        r for r in model.requests() if r["conversation"] == f"analyse {tag}" and r["turn"] == 1
    )
    assert analyse_turn_1["last"]["role"] == "tool"
    assert "ChildFailed" in analyse_turn_1["last"]["text"]
    assert "frozen" in analyse_turn_1["last"]["text"]


async def test_a_tool_an_agent_calls_may_ask_a_person_while_the_other_calls_run(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    calls = {
        "tool_calls": [
            {"name": "confirm_refund", "arguments": {"amount": 20}},
            {"name": "web_search", "arguments": {"query": "refund policy"}},
        ]
    }
    question = model.conversation(calls, _answer("Refunded."))
    handle = await client.submit_agent("cashier", question)

    async def asking() -> str:
        children = (await handle.get()).children
        assert len(children) == 1
        assert (await client.get(children[0])).status is TaskStatus.WAITING
        return children[0]

    child = await eventually(asking, timeout=30)
    assert (await client.get(child)).input_request.prompt == "Refund 20?"  # type: ignore[union-attr]
    assert (await handle.get()).status is TaskStatus.RUNNING  # the other call ran on
    await client.send_input(child, {"ok": True})

    assert await handle.wait(timeout=30) == "Refunded."
    second = model.requests(question)[1]
    assert second["tool_results"] == ["call_0_0", "call_0_1"]
    ran = read_branch_executions(executions)
    assert ran[(handle.task_id, 1, 0)] == 1  # it asked once; the answer completed it
    assert ran[(handle.task_id, 1, 1)] == 1


async def test_a_tool_that_sleeps_answers_the_model_when_it_wakes(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    """Its branch waits in a child task, holding no worker, while the other calls run; the
    timer that ends the wait gives the model the sleep's output."""
    calls = [
        {"name": "snooze", "arguments": {"for": "a while"}},
        {"name": "web_search", "arguments": {"query": "naps"}},
    ]
    question = model.conversation({"tool_calls": calls}, {"content": "Rested."})
    handle = await client.submit_agent("sleepy", question)
    assert await handle.wait(timeout=30) == "Rested."
    told = model.requests(question)[-1]["tool_texts"]
    assert told == ["rested a while", '["naps: result 1","naps: result 2"]']
    assert executions.read_text().count("snooze") == 1  # woke from its checkpoint: not run again
    (child,) = (await handle.get()).children
    assert (await client.get(child)).status is TaskStatus.COMPLETED
