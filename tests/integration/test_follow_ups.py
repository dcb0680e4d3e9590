"""Follow-ups (`client.continue_agent`): a new agent task whose conversation starts with a
finished one's, by reference, through the real `openai` client and the scripted model."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.conftest import Raw
from tests.e2e.test_cli_ops import tether
from tether import Client, NatsConfig, TaskConflictError, TaskFailedError, Worker
from tether.nats.store import Store
from tether.schemas.codec import encode
from tether.testing.llm import ScriptedModel

SEARCH = {
    "tool_calls": [{"name": "web_search", "arguments": {"query": "durable agents"}}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 10},
}


UNFINISHED = [{"tool": "slow_search", "input": {"query": "q"}}] * 10
"""A task that runs for 20 s: unfinished while a test asks of it."""


async def test_a_follow_up_sees_the_whole_earlier_conversation_and_chains(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(
        SEARCH,
        {"content": "Checkpoints."},
        {"content": "Because every step is stored."},
        {"content": "Yes: by reference."},
    )
    first = await client.submit_agent("researcher", question)
    assert await first.wait(timeout=30) == "Checkpoints."

    second = await client.continue_agent(first.task_id, "Why does that help?")
    assert await second.wait(timeout=30) == "Because every step is stored."
    third = await client.continue_agent(second.task_id, "And a third time?")
    assert await third.wait(timeout=30) == "Yes: by reference."

    calls = model.requests(question)
    assert [(c["turn"], c["attempt"]) for c in calls] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    # system, question, the search call, its result, the answer, then each follow-up
    assert [c["messages"] for c in calls] == [2, 4, 6, 8]
    assert calls[2]["last"] == {"role": "user", "text": "Why does that help?"}
    assert calls[3]["last"] == {"role": "user", "text": "And a third time?"}
    assert calls[3]["tool_results"] == ["call_0_0"]  # the first task's tool result, once
    usage = (await third.get()).usage
    assert usage is not None and usage.requests == 1  # a follow-up counts its own calls


async def test_a_follow_up_after_20_turns_writes_per_turn_what_turn_5_wrote(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    shout = {
        "tool_calls": [{"name": "shout", "arguments": {"input": "again"}, "id": "c"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
    }
    answer = {"content": "Done.", "usage": {"prompt_tokens": 100, "completion_tokens": 10}}
    question = model.conversation(*[shout] * 19, answer, shout, shout, answer)
    earlier = await client.submit_agent("chatty", question, task_id=f"t{uuid.uuid4().hex[:9]}")
    assert await earlier.wait(timeout=60) == "Done."

    later = await client.continue_agent(
        earlier.task_id, "More?", new_task_id=f"t{uuid.uuid4().hex[:9]}"
    )
    assert await later.wait(timeout=30) == "Done."

    calls = model.requests(question)
    assert [c["turn"] for c in calls] == list(range(23))  # each call once, the thread whole
    assert calls[20]["messages"] == 42  # 1 + 1 + 19 × 2 + 1, then the follow-up
    checkpoints = store.checkpoints

    async def turn_bytes(task_id: str, step: int) -> int:
        found = await checkpoints.get(task_id, step)
        assert found is not None
        return len(encode(found))

    # turn 5 is step 8 (a turn, then its tool call, each time); the follow-up's second
    # turn (the thread's 22nd) is its step 2: the same reply writes the same bytes
    assert await turn_bytes(later.task_id, 2) == await turn_bytes(earlier.task_id, 8)
    assert await turn_bytes(later.task_id, 3) == await turn_bytes(earlier.task_id, 9)
    opening = (await later.plan())[0]
    assert len(encode(opening)) < 120  # the reference, not the 40 messages before it


async def test_only_a_completed_conversation_can_be_continued(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Fine."})
    running = await client.submit(UNFINISHED)
    with pytest.raises(TaskConflictError, match="only a completed conversation"):
        await client.continue_agent(running.task_id, "and?")

    # raw JSON naming a task that is gone: the follow-up fails saying so
    raw = {"tool": "researcher", "input": {"input": question, "after": "no-such-task"}}
    handle = await client.submit([raw])
    with pytest.raises(TaskFailedError, match="'no-such-task', does not exist"):
        await handle.wait(timeout=30)
    # a task that is not an agent's conversation
    done = await client.submit([{"tool": "web_search", "input": {"query": "q"}}])
    await done.wait(timeout=30)
    misled = await client.continue_agent(done.task_id, "and?", agent="researcher")
    with pytest.raises(TaskFailedError, match="is not an agent's conversation"):
        await misled.wait(timeout=30)


async def test_the_cli_asks_a_follow_up_and_refuses_an_unfinished_task(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    question = model.conversation({"content": "First."}, {"content": "Second."})
    first = await client.submit_agent("researcher", question)
    await first.wait(timeout=30)

    asked = await tether(config, "submit", "--continue", first.task_id, "And?", "--wait")

    assert asked.code == 0, asked.err
    later = asked.out.splitlines()[0]
    assert await client.handle(later).wait(timeout=5) == "Second."
    assert (await client.get(later)).steps[-1].tool == "researcher"  # the earlier's agent
    running = await client.submit(UNFINISHED)
    refused = await tether(config, "submit", "--continue", running.task_id, "And?")
    assert refused.code != 0 and "only a completed conversation" in refused.err


async def test_the_api_verb_continue_asks_a_follow_up_and_answers_errors_typed(
    client: Client,
    store: Store,
    raw: Raw,
    api: object,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    question = model.conversation({"content": "First."}, {"content": "Second."})
    first = await client.submit_agent("researcher", question)
    await first.wait(timeout=30)
    subject = store.names.api_subject("continue")

    async def ask(body: dict[str, Any]) -> dict[str, Any]:
        reply = await raw.nc.request(subject, json.dumps(body).encode(), timeout=10)
        answer: dict[str, Any] = json.loads(reply.data)
        return answer

    later = await ask({"task_id": first.task_id, "input": "And?", "new_task_id": "api-follow"})
    assert later == {"task_id": "api-follow"}
    assert await client.handle("api-follow").wait(timeout=30) == "Second."
    assert (await ask({"task_id": "ghost", "input": "?"}))["error"]["code"] == "not_found"
    unfinished = await client.submit(UNFINISHED)
    refused = await ask({"task_id": unfinished.task_id, "input": "?"})
    assert refused["error"]["code"] == "conflict"
    invalid = await ask({"task_id": first.task_id})
    assert invalid["error"]["code"] == "invalid" and "`input`" in invalid["error"]["message"]
