"""Budgets that hold and can be raised (issue 38, items 11-13 and a smaller one): an
agent's budget is a ceiling a run may not pass; `update_agent` opens a budget mid-run; a
task failed by its spent budget is raised and retried as its error says; a person whose
answer is too small is told why."""

from __future__ import annotations

import re
import shlex
import uuid

import msgspec
import pytest

from tests.e2e.test_cli_ops import tether
from tether import Agent, App, Client, NatsConfig, OpenAIModel, TaskFailedError, TaskStatus, Worker
from tether.agents import Price
from tether.agents.budget import Ledger
from tether.nats.store import Store
from tether.schemas.records import TaskRecord
from tether.testing.llm import ScriptedModel

USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}
SEARCH = {"tool_calls": [{"name": "slow_search", "arguments": {"query": "q"}}], "usage": USAGE}


async def _ledger(store: Store, root: str) -> Ledger | None:
    found = await store.checkpoints.entry(f"{root}.budget")
    return None if found is None else msgspec.json.decode(found[0], type=Ledger)


def _waiting(record: TaskRecord) -> bool:
    return record.status is TaskStatus.WAITING


async def test_a_run_may_ask_for_less_than_its_agents_budget_never_more(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """Item 11: `guarded` is registered with 10,000 tokens, the most any run may have."""
    question = model.conversation({"content": "Small is fine."})
    asked_less = await client.submit_agent("guarded", question, token_budget=6_000)
    assert await asked_less.wait(timeout=30) == "Small is fine."
    ledger = await _ledger(store, asked_less.task_id)
    assert ledger is not None and ledger.tokens == 6_000

    greedy = model.conversation({"content": "Never sent."})
    raw = {"tool": "guarded", "input": {"input": greedy, "token_budget": 10**9}}
    handle = await client.submit([raw])  # as any raw JSON submit, or an MCP caller, may
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error.type == "BudgetAboveCeiling"
    message = failed.value.error.message
    assert "a token_budget of 1,000,000,000, more than the agent's 10,000" in message
    assert "ask for 10,000 or less" in message
    assert await _ledger(store, handle.task_id) is None  # never opened
    assert model.requests(greedy) == []


async def test_update_agent_opens_a_budget_mid_run_and_the_next_call_is_bounded_by_it(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """Item 12: a task started without a budget is given one while a tool runs."""
    question = model.conversation(SEARCH, {"content": "Done.", "usage": USAGE})
    handle = await client.submit_agent("researcher", question)
    await handle.wait_for(lambda r: r.current_step == 1, timeout=30)  # the search runs
    assert await _ledger(store, handle.task_id) is None
    # 100 left after the first call: no room for the next call's input and a short answer
    await client.update_agent(handle.task_id, token_budget=1_600)

    waiting = await handle.wait_for(_waiting, timeout=30)
    assert waiting.input_request is not None
    assert "budget of 1,600 tokens (1,500 spent" in waiting.input_request.prompt  # its first call
    assert len(model.requests(question)) == 1  # the next call was not sent
    ledger = await _ledger(store, handle.task_id)
    assert ledger is not None and ledger.tokens == 1_600 and ledger.spent_tokens == 1_500

    await handle.send_input({"tokens": 100_000})
    assert await handle.wait(timeout=30) == "Done."
    ledger = await _ledger(store, handle.task_id)
    assert ledger is not None and ledger.spent_tokens == 3_000  # bounded and counted from then


async def test_a_task_failed_by_its_budget_is_raised_and_retried_as_its_error_says(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    """Item 13: the error's two commands, pasted as they are, run the task on."""
    question = model.conversation({"content": "Worth the wait.", "usage": USAGE})
    handle = await client.submit_agent("thrifty", question, token_budget=100)
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert failed.value.error.type == "TokenBudgetExceeded"
    commands = re.findall(r"'(tether [^']+)'", failed.value.error.message)
    assert [c.split()[:2] for c in commands] == [["tether", "update-agent"], ["tether", "dlq"]]
    assert model.requests(question) == []

    for command in commands:
        done = await tether(config, *shlex.split(command)[1:])
        assert done.code == 0, done.err

    assert await handle.wait(timeout=30) == "Worth the wait."
    assert len(model.requests(question)) == 1  # sent once, after the raise


async def test_update_agent_refuses_messages_to_a_failed_task_but_takes_new_settings(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Never sent."})
    handle = await client.submit_agent("thrifty", question, token_budget=100)
    with pytest.raises(TaskFailedError):
        await handle.wait(timeout=30)
    await client.update_agent(handle.task_id, token_budget=50_000)  # accepted: the retry reads it
    with pytest.raises(Exception, match="update_agent may still change its settings"):
        await client.send_message(handle.task_id, "hello?")


FRUGAL_MODEL = OpenAIModel("scripted", api_key="test", price=Price(input=1.0, output=1.0))


def _frugal(cost_budget: float) -> App:
    """A build of the app whose agent `frugal` has `cost_budget` dollars by default."""
    app = App("frugal")
    app.add(Agent("frugal", model=FRUGAL_MODEL, cost_budget=cost_budget, on_budget="fail"))
    return app


async def test_a_root_on_its_agents_default_follows_the_default_raised_and_retried(
    config: NatsConfig, client: Client, store: Store, dispatcher: object, model: ScriptedModel
) -> None:
    """Item 13, in dollars: `update_agent` takes no cost budget, so the error says to raise
    the agent's, restart its workers and retry, and that is what runs it on."""
    question = model.conversation({"content": "Paid for.", "usage": USAGE})
    async with Worker(_frugal(0.00001), config):
        handle = await client.submit_agent("frugal", question)  # $0.00001: 10 tokens
        with pytest.raises(TaskFailedError) as failed:
            await handle.wait(timeout=30)
    message = failed.value.error.message
    assert failed.value.error.type == "BudgetExceeded"
    assert "raise the agent's cost_budget" in message and "restart its workers" in message
    assert f"'tether dlq retry {handle.task_id}'" in message

    async with Worker(_frugal(1.0), config):
        await client.retry(handle.task_id)
        assert await handle.wait(timeout=30) == "Paid for."
    ledger = await _ledger(store, handle.task_id)
    assert ledger is not None and ledger.usd == 1.0
    assert len(model.requests(question)) == 1


async def test_an_answer_below_what_the_next_call_needs_is_asked_again_saying_why(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """Smaller item: the new question says what the next call needs and what was given."""
    question = model.conversation({"content": f"Enough {uuid.uuid4().hex[:6]}."})
    handle = await client.submit_agent("researcher", question, token_budget=100)
    first = await handle.wait_for(_waiting, timeout=30)
    assert first.input_request is not None
    needs = re.search(r"a limit of at least ([\d,]+)", first.input_request.prompt)
    assert needs is not None, first.input_request.prompt
    least = int(needs.group(1).replace(",", ""))

    first_prompt = first.input_request.prompt
    await handle.send_input({"tokens": 200})

    def asked_again(record: TaskRecord) -> bool:
        request = record.input_request
        return _waiting(record) and request is not None and request.prompt != first_prompt

    again = await handle.wait_for(asked_again, timeout=30)
    assert again.input_request is not None
    prompt = again.input_request.prompt
    assert 'the answer {"tokens":200} was not enough' in prompt
    assert f"(at least 16): a limit of at least {least:,}" in prompt
    assert "budget of 200 tokens" in prompt

    await handle.send_input({"tokens": least})  # room for a short answer: it is sent
    assert (await handle.wait(timeout=30)).startswith("Enough")
    assert model.requests(question)[-1]["max_tokens"] == 16
