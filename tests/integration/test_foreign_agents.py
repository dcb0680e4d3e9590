"""What a Pydantic AI agent and an OpenAI Agents SDK agent added to an app both do, on a
`tether worker` process: the first token of a long answer reaches `handle.stream()`
while the model is still writing it, not once its stream has ended, and a token budget
stops the run before the call that would cross it (real `openai` client through each
framework, scripted model in its own process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_worker, stop_worker
from tests.e2e.test_cli_ops import tether
from tests.foreign_agents import OPENAI_AGENTS, PYDANTIC_AGENTS, call, ran, spent, usage
from tests.servers import free_port
from tether import (
    Client,
    NatsConfig,
    TaskCancelledError,
    TaskFailedError,
    TaskHandle,
    TaskStatus,
)
from tether.schemas import StepRetrying
from tether.testing import eventually, wait_until
from tether.testing.llm import ScriptedModel

WORDS = 2000
STALL = 60.0
"""How long the model holds the rest of its answer after its first words: longer than
the test waits for the first token, so a token that arrives came before the end."""
AGENTS = pytest.mark.parametrize("agent", ["oai_helper", "pai_helper"])


@pytest.fixture
async def worker(
    config: NatsConfig, client: Client, model: ScriptedModel, executions: Path, tmp_path: Path
) -> AsyncIterator[None]:
    """A worker process serving both frameworks' agents, registered."""
    process = start_worker(config, OPENAI_AGENTS, PYDANTIC_AGENTS, log=tmp_path / "worker.log")

    async def registered() -> bool:
        return None not in [await client.tool(name) for name in ("oai_helper", "pai_chat")]

    try:
        await wait_until(registered, timeout=30, message="the worker to register its agents")
        yield
    finally:
        stop_worker(process)


@AGENTS
async def test_the_first_token_of_a_long_answer_arrives_before_the_models_stream_ends(
    client: Client, worker: None, model: ScriptedModel, agent: str
) -> None:
    answer = " ".join(f"w{n}" for n in range(WORDS))
    stalled = {"stall_after": 10, "seconds": STALL}  # ten words, then a pause
    question = model.conversation(
        {"content": answer, "usage": usage(30, WORDS), "faults": [stalled]}
    )
    handle = await client.submit_agent(agent, question)

    async with asyncio.timeout(STALL / 2):  # the model's stream is open for STALL more
        first = await anext(aiter(handle.stream()))

    assert first.delta and answer.startswith(first.delta)
    assert (first.step, first.attempt) == (0, 1)
    assert (await handle.get()).status in {TaskStatus.PENDING, TaskStatus.RUNNING}
    [sent] = model.requests(question)  # one call, still answering
    assert sent["stream"] is True
    await client.cancel(handle.task_id)
    with pytest.raises(TaskCancelledError):
        await handle.wait(timeout=30)
    assert len(model.requests(question)) == 1


@pytest.mark.parametrize(
    ("agent", "tool", "tag"),
    [
        ("oai_helper", call("get_weather", city="Rome"), "get_weather Rome"),
        ("pai_chat", call("add", a=1, b=2), "add"),
    ],
)
async def test_a_token_budget_stops_the_run_before_the_call_that_would_cross_it(
    client: Client,
    worker: None,
    model: ScriptedModel,
    executions: Path,
    agent: str,
    tool: dict[str, Any],
    tag: str,
) -> None:
    spend = usage(300, 200)
    question = model.conversation({**tool, "usage": spend}, {"content": "Done.", "usage": spend})
    handle = await client.submit_agent(agent, question, token_budget=520)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and "BudgetExceeded" in error.type
    [sent] = model.requests(question)  # the second call, past the budget, was not sent
    assert sent["max_tokens"] is not None and sent["max_tokens"] <= 520
    assert ran(executions, tag) == 1  # the tool between the two calls did run
    assert (await spent(handle)).total_tokens == 500


@pytest.mark.parametrize("agent", ["oai_helper", "pai_helper", "pai_chat"])
async def test_a_conversation_given_as_input_reaches_the_model_whole(
    client: Client, worker: None, model: ScriptedModel, agent: str
) -> None:
    """A conversation in, the same conversation to the model (after the instructions):
    the earlier messages as the run's history, a tool call and its result included, not
    dropped for the last user message."""
    question = model.conversation({"content": "-"}, {"content": "-"}, {"content": "Tuesday."})
    call = {"id": "call_7", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    conversation = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": "Monday"},
        {"role": "assistant", "content": "The delivery is on Monday."},
        {"role": "user", "content": "Sorry, which day again?"},
    ]
    handle = await client.submit_agent(agent, conversation)

    assert await handle.wait(timeout=30) == "Tuesday."
    [sent] = model.requests(question)
    assert sent["turn"] == 2  # both assistant messages reached it
    assert sent["messages"] == 5 + (sent["system"] is not None)
    assert sent["tool_results"] == ["call_7"] and sent["tool_texts"] == ["Monday"]
    assert sent["last"] == {"role": "user", "text": "Sorry, which day again?"}


@pytest.mark.usefixtures("sdk_client")
@pytest.mark.parametrize(
    ("agent", "app"), [("oai_helper", OPENAI_AGENTS), ("pai_chat", PYDANTIC_AGENTS)]
)
async def test_a_model_url_with_nothing_listening_is_named_at_once_in_one_line(
    config: NatsConfig,
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    app: str,
) -> None:
    """As for Tether's own agents: the first retry says which URL could not be reached
    and where it was set, and the worker logs it once, in one line, no traceback."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    log = tmp_path / "worker.log"
    process = start_worker(config, app, log=log)
    try:
        await wait_until(lambda: _registered(client, agent), timeout=60, message="the agent")
        handle = await client.submit_agent(agent, "anyone there?")
        async with asyncio.timeout(60):
            retried = [e async for e in _retries(handle, 2)]

        async def shown() -> str:  # between attempts (while one runs, its error is not news)
            status = await tether(config, "status", handle.task_id)
            assert f"could not connect to {url}" in status.out, status.out
            return status.out

        await eventually(shown, timeout=60)
        await client.cancel(handle.task_id)
    finally:
        stop_worker(process)

    said = retried[0].error.message if retried[0].error is not None else ""
    assert said.startswith(f"could not connect to {url}: ")
    assert "the URL is from OPENAI_BASE_URL" in said and repr(agent) in said
    lines = log.read_text().splitlines()
    logged = [line for line in lines if handle.task_id in line]
    assert len(logged) == 1 and "retrying in" in logged[0]  # later retries: DEBUG lines
    assert not [line for line in lines if "Traceback" in line], lines
    retries = [e async for e in handle.events() if isinstance(e, StepRetrying)]
    assert len(lines) <= 5 + 3 * len(retries), lines  # its client's two a retry at most


async def _registered(client: Client, agent: str) -> bool:
    return await client.tool(agent) is not None


async def _retries(handle: TaskHandle, times: int) -> AsyncIterator[StepRetrying]:
    """The task's first `times` retries, as they come."""
    count = 0
    async for event in handle.events():
        if isinstance(event, StepRetrying):
            yield event
            count += 1
            if count == times:
                return
