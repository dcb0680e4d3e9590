"""A Pydantic AI agent's worker killed (SIGKILL) in the middle of its second tool call: a
new worker finishes the run, each finished model call was sent once, the finished tool
did not run again, and the task's usage is what the model reported."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.crashes import survive
from tests.conftest import start_worker
from tether import Client, NatsConfig, TaskStatus, Worker
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow
APP = "tests.apps.pydantic_agents:app"


@pytest.fixture
async def registered(config: NatsConfig, model: ScriptedModel) -> None:
    """The agents registered, with no worker left running."""
    from tests.apps.pydantic_agents import app

    async with Worker(app, config):
        pass


def _turns(model: ScriptedModel, question: str) -> Counter[int]:
    return Counter(r["turn"] for r in model.requests(question))


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


async def test_a_crash_mid_tool_reruns_only_the_tool_in_flight(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = tmp_path / "release"
    monkeypatch.setenv("TETHER_TEST_RELEASE", str(release))
    add = {"name": "add", "arguments": {"a": 2, "b": 3}}
    lookup = {"name": "slow_lookup", "arguments": {"city": "Oslo"}}
    question = model.conversation(
        {"content": "Adding first.", "tool_calls": [add], "usage": _usage(50, 5)},
        {"tool_calls": [lookup], "usage": _usage(70, 6)},
        {"content": "5, and Oslo is sunny.", "usage": _usage(90, 7)},
    )
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("pai_chat", question)
        await wait_until(
            lambda: "slow_lookup" in executions.read_text(),
            timeout=30,
            message="the second tool call to start",
        )
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    release.touch()

    assert await survive(config, handle, APP) == "5, and Oslo is sunny."
    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    ran = Counter(line.split()[0] for line in executions.read_text().splitlines())
    assert ran == {"add": 1, "slow_lookup": 2}  # the finished tool did not run again
    record = await handle.get()
    assert record.usage is not None
    assert (record.usage.requests, record.usage.input_tokens) == (3, 210)
    assert record.usage.output_tokens == 18
    chunks = [c async for c in handle.stream()]
    won = max(c.attempt for c in chunks)
    text = "".join(c.delta for c in chunks if c.attempt == won)
    assert text == "Adding first.5, and Oslo is sunny."  # each turn's text once, as it won


async def test_a_worker_killed_while_the_task_waits_for_approval_loses_nothing(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
) -> None:
    add = {"name": "add", "arguments": {"a": 1, "b": 2}}
    delete = {"name": "delete_rows", "arguments": {"table": "old"}}
    question = model.conversation(
        {"tool_calls": [add]}, {"tool_calls": [delete]}, {"content": "3, and old is gone."}
    )
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("pai_helper", question)
        await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    await handle.send_input({"approved": True})

    assert await survive(config, handle, APP) == "3, and old is gone."
    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}
    ran = Counter(line.split()[0] for line in executions.read_text().splitlines())
    assert ran == {"add": 1, "delete_rows": 1}
