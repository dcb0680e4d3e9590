"""Budgets across a whole tree of agents: each LLM call reserves its worst case before it
is sent, so no call starts once the budget is spent, whichever branch or sub-agent makes
it; then the task asks a person to raise it (or fails, if the agent says so)."""

from __future__ import annotations

import uuid
from collections import Counter

import msgspec
import pytest

from tether import Client, TaskFailedError, TaskStatus, Worker
from tether.agents.budget import DEFAULT_OUTPUT_CAP, Ledger
from tether.nats.store import Store
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}
LIMIT = 1500 * 7 + 10
"""Seven calls fit; the eighth has no room for its input and a short answer: it asks."""


async def _ledger(store: Store, root: str) -> Ledger | None:
    found = await store.checkpoints.entry(f"{root}.budget")
    return None if found is None else msgspec.json.decode(found[0], type=Ledger)


def _sent_once(model: ScriptedModel, conversation: str) -> bool:
    calls = Counter((c["turn"], c["attempt"]) for c in model.requests(conversation))
    return all(n == 1 for n in calls.values()) and {a for _, a in calls} <= {0}


async def test_a_budget_across_three_parallel_sub_agents_stops_within_one_call_then_is_raised(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    tag = uuid.uuid4().hex[:8]
    question, subs = f"budget {tag}", [f"sub {tag} {n}" for n in range(3)]
    delegate = [{"name": "researcher", "arguments": {"input": sub}} for sub in subs]
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": tag}}], "usage": USAGE}
    model.load(
        {
            "conversations": [
                {
                    "match": question,
                    "turns": [
                        {"tool_calls": delegate, "usage": USAGE},
                        {"content": "All done.", "usage": USAGE},
                    ],
                },
                *(
                    {"match": sub, "turns": [search, {"content": f"on {sub}", "usage": USAGE}]}
                    for sub in subs
                ),
            ]
        }
    )
    handle = await client.submit_agent("analyst", question, token_budget=LIMIT)

    async def asking() -> Ledger:
        ledger = await _ledger(store, handle.task_id)
        assert ledger is not None and ledger.asking is not None, "a task of the tree asks"
        # the ledger names the asker a moment before its question step has run
        assert (await client.get(ledger.asking)).status is TaskStatus.WAITING
        return ledger

    ledger = await eventually(asking, timeout=30)
    assert ledger.asking is not None
    spent = 1500 * sum(len(model.requests(c)) for c in [question, *subs])
    assert ledger.spent_tokens == spent <= LIMIT  # never past the limit, counted whole
    assert LIMIT - spent < DEFAULT_OUTPUT_CAP + 1000  # stopped within one call of it
    asker = await client.get(ledger.asking)
    assert asker.status is TaskStatus.WAITING and asker.input_request is not None
    assert f"budget of {LIMIT:,} tokens" in asker.input_request.prompt

    await client.send_input(ledger.asking, {"tokens": 100_000})

    assert await handle.wait(timeout=60) == "All done."
    for conversation in [question, *subs]:
        assert _sent_once(model, conversation), model.requests(conversation)
    final = await _ledger(store, handle.task_id)
    assert final is not None and final.tokens == 100_000 and final.spent_tokens == 1500 * 8
    assert final.held == {} and final.asking is None
    assert (await handle.get()).usage.total_tokens == 1500 * 8  # the tree's usage, summed


async def test_a_budget_too_small_for_any_call_asks_first_and_stop_fails_the_task(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Never sent."})
    handle = await client.submit_agent("researcher", question, token_budget=100)
    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    assert waiting.input_request is not None
    assert "budget of 100 tokens (0 spent" in waiting.input_request.prompt

    await handle.send_input({"stop": True})

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error.type == "BudgetExceeded"
    assert "a person said to stop" in failed.value.error.message
    assert model.requests(question) == []  # no call started


async def test_an_agent_that_says_so_fails_when_its_budget_is_spent(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Never sent."})
    handle = await client.submit_agent("thrifty", question, token_budget=100)
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error.type == "TokenBudgetExceeded"
    assert "raise it ('tether update-agent" in failed.value.error.message
    assert model.requests(question) == []


async def test_a_cost_budget_on_a_model_without_a_price_says_how_to_give_one(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Never sent."})
    handle = await client.submit_agent("researcher", question, cost_budget=2.0)
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert "no price for the model 'scripted'" in failed.value.error.message
    assert "price=Price(" in failed.value.error.message


async def test_a_calls_prompt_is_held_at_least_at_what_the_model_reported_for_the_last_one(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """A model that reports 1,000 prompt tokens for a short conversation (a long system
    prompt, tool schemas): each call holds at least that plus what was added since, so
    the tree never spends past its budget (issue 50, item 8); estimated from characters
    alone, the fourth call fit and crossed it."""
    reported = {"prompt_tokens": 1000, "completion_tokens": 10}
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}]}
    question = model.conversation(*[{**search, "usage": reported}] * 4, {"content": "Done."})
    handle = await client.submit_agent("thrifty", question, token_budget=3500)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)

    error = failed.value.error
    assert error is not None and error.type == "TokenBudgetExceeded"
    usage = (await handle.get()).usage
    assert usage is not None and usage.total_tokens <= 3500, usage
    assert len(model.requests(question)) == 3  # the fourth was not sent
