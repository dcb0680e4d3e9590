"""A call under a budget is sent a `max_tokens` of what the budget has left after its
input, and reserves exactly that: a small budget answers within it instead of being
"reached" by a guess of 4,096 tokens, and only a budget with no room for a short answer
asks (saying what the next call needs and what an answer does)."""

from __future__ import annotations

import msgspec

from tether import Client, TaskStatus, Worker
from tether.agents.answer_caps import MIN_ANSWER
from tether.agents.budget import Ledger
from tether.nats.store import Store
from tether.testing.llm import ScriptedModel

ANSWER = {"content": "A short answer.", "usage": {"completion_tokens": 415}}


async def _ledger(store: Store, root: str) -> Ledger:
    found = await store.checkpoints.entry(f"{root}.budget")
    assert found is not None
    return msgspec.json.decode(found[0], type=Ledger)


async def test_a_budget_of_2000_answers_415_tokens_with_max_tokens_of_what_is_left(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(ANSWER)
    handle = await client.submit_agent("researcher", question, token_budget=2000)

    assert await handle.wait(timeout=30) == "A short answer."
    (sent,) = model.requests(question)
    assert 415 <= sent["max_tokens"] < 2000 - MIN_ANSWER  # its input is held too
    ledger = await _ledger(store, handle.task_id)
    assert ledger.held == {} and 415 < ledger.spent_tokens <= 2000


async def test_a_budget_too_small_for_a_short_answer_asks_saying_what_the_call_needs(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(ANSWER)
    handle = await client.submit_agent("researcher", question, token_budget=100)
    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    assert waiting.input_request is not None
    prompt = waiting.input_request.prompt
    assert "budget of 100 tokens (0 spent, 0 held) reached" in prompt
    assert "the next call sends about" in prompt and f"(at least {MIN_ANSWER})" in prompt
    assert '{"tokens": N} makes the limit N tokens in all' in prompt
    assert model.requests(question) == []

    await handle.send_input({"tokens": 3000})

    assert await handle.wait(timeout=30) == "A short answer."
    (sent,) = model.requests(question)
    assert 415 <= sent["max_tokens"] < 3000 - MIN_ANSWER
