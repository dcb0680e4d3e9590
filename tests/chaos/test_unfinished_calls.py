"""An LLM call its worker's death cut off (SIGKILL mid-answer) is spend all the same: the
next attempt finds the call's mark still open and counts it, tokens unknown, beside the
call that finished (issue 40, item 7)."""

from __future__ import annotations

import importlib
import os
import signal
from pathlib import Path

import pytest

from tests.apps.agents import app as agents
from tests.chaos.crashes import survive
from tests.conftest import start_worker
from tether import App, Client, NatsConfig, Worker
from tether.cli.output import format_usage
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow
AGENTS = "tests.apps.agents:app"
OPENAI, PYDANTIC = "tests.apps.openai_agents:app", "tests.apps.pydantic_agents:app"
ANSWER = {"content": "Durable steps survive crashes, and so does the account."}


def load(app: str) -> App:
    module, _, attribute = app.partition(":")
    found: App = getattr(importlib.import_module(module), attribute)
    return found


@pytest.fixture
async def registered(config: NatsConfig) -> None:
    """The agent and its tools registered, with no worker left running."""
    async with Worker(agents, config):
        pass


async def test_a_call_killed_mid_answer_is_counted_as_cut_off(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    stalls = {**ANSWER, "faults": [{"stall_after": 3, "seconds": 60}]}
    question = model.conversation(stalls)
    doomed = start_worker(config, AGENTS, log=tmp_path / "doomed.log")
    handle = await client.submit_agent("researcher", question)
    async for _ in handle.stream():  # the first attempt answers, then stalls: in flight
        break
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()

    assert await survive(config, handle, AGENTS) == ANSWER["content"]

    usage = (await handle.get()).usage
    assert usage is not None
    assert (usage.requests, usage.unfinished) == (2, 1)  # one finished, one cut off
    assert usage.total_tokens > 0  # the finished call's
    assert "2 LLM calls (1 cut off: tokens unknown)" in format_usage(usage)


@pytest.mark.usefixtures("sdk_client")
@pytest.mark.parametrize(("agent", "app"), [("oai_helper", OPENAI), ("pai_chat", PYDANTIC)])
async def test_a_foreign_agents_call_killed_mid_answer_is_counted_as_cut_off(
    config: NatsConfig, client: Client, model: ScriptedModel, tmp_path: Path, agent: str, app: str
) -> None:
    """A Pydantic AI or Agents SDK agent's model call cut by its worker's SIGKILL counts
    as a request sent, its tokens unknown, as Tether's own agent's does."""
    async with Worker(load(app), config):  # registered, then gone
        pass
    stalls = {**ANSWER, "faults": [{"stall_after": 3, "seconds": 60}]}
    question = model.conversation(stalls)
    doomed = start_worker(config, app, log=tmp_path / "doomed.log")
    handle = await client.submit_agent(agent, question)
    async for _ in handle.stream():  # the first attempt answers, then stalls: in flight
        break
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()

    assert await survive(config, handle, app) == ANSWER["content"]

    assert len(model.requests(question)) == 2
    usage = (await handle.get()).usage
    assert usage is not None
    assert (usage.requests, usage.unfinished) == (2, 1)  # one finished, one cut off
