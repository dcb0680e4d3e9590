"""An OpenAI Agents SDK agent's worker killed (SIGKILL) in the middle of a tool call and
while its task waits for an approval: a new worker finishes the run, no finished model
call is sent again and no finished tool call runs again."""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.openai_agents import app as oai
from tests.conftest import start_worker
from tether import Client, NatsConfig, TaskStatus, Worker
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow
APP = "tests.apps.openai_agents:app"


@pytest.fixture(autouse=True)
async def _fresh_http_client() -> AsyncIterator[None]:
    """The SDK shares one httpx client per process, bound to the event loop it was first
    used on; each test runs on a loop of its own (a worker has one for its life)."""
    import agents.models.openai_provider as provider

    yield
    if provider._http_client is not None:
        await provider._http_client.aclose()
        provider._http_client = None


@pytest.fixture
async def registered(config: NatsConfig) -> None:
    async with Worker(oai, config):
        pass


@pytest.fixture
def gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gates"
    path.mkdir()
    monkeypatch.setenv("TETHER_TEST_GATES", str(path))
    return path


def _turns(model: ScriptedModel, question: str) -> Counter[int]:
    return Counter(r["turn"] for r in model.requests() if r["conversation"] == question)


def _ran(executions: Path, tag: str) -> int:
    return sum(1 for line in executions.read_text().splitlines() if line.startswith(tag + " "))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_a_worker_killed_mid_tool_reruns_only_that_tool(
    config: NatsConfig,
    client: Client,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    gates: Path,
    tmp_path: Path,
) -> None:
    key = f"k{uuid.uuid4().hex[:6]}"
    question = f"question {key}"
    turns = [_call("get_weather", city=key), _call("slow_lookup", key=key), {"content": "42."}]
    model.load({"conversations": [{"match": question, "turns": turns}]})
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("oai_helper", question)
        started = gates / f"{key}.started"
        await wait_until(started.exists, timeout=30, message="slow_lookup to start")
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    (gates / f"{key}.go").touch()

    async with Worker(oai, config):
        assert await handle.wait(timeout=60) == "42."

    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    assert _ran(executions, f"get_weather {key}") == 1  # finished before the kill
    assert _ran(executions, f"slow_lookup {key}") == 2  # in flight: runs again
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 3


async def test_a_worker_killed_while_its_task_waits_for_approval_loses_nothing(
    config: NatsConfig,
    client: Client,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
) -> None:
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    question = f"question {uuid.uuid4().hex[:8]}"
    turns = [_call("get_weather", city=path), _call("delete_file", path=path), {"content": "Done."}]
    model.load({"conversations": [{"match": question, "turns": turns}]})
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("oai_helper", question)
        await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    await client.send_input(handle.task_id, {"approved": True})

    async with Worker(oai, config):
        assert await handle.wait(timeout=60) == "Done."

    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}
    assert _ran(executions, f"get_weather {path}") == 1
    assert _ran(executions, f"delete_file {path}") == 1
    record = await handle.get()
    assert record.usage is not None and record.usage.requests == 3


async def test_a_tool_that_runs_the_sdk_itself_is_durable_through_the_drop_in_runner(
    config: NatsConfig,
    client: Client,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    gates: Path,
    tmp_path: Path,
) -> None:
    key = f"k{uuid.uuid4().hex[:6]}"
    text = f"text {key}"
    first = [_call("get_weather", city=key), _call("slow_lookup", key=key), {"content": "One."}]
    conversations = [
        {"match": f"{text} again", "turns": [{"content": "Two."}]},
        {"match": text, "turns": first},
    ]
    model.load({"conversations": conversations})
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit([{"tool": "summarize", "input": text}])
        started = gates / f"{key}.started"
        await wait_until(started.exists, timeout=30, message="slow_lookup to start")
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    (gates / f"{key}.go").touch()

    async with Worker(oai, config):
        assert await handle.wait(timeout=60) == "One. / Two."

    assert _turns(model, text) == {0: 1, 1: 1, 2: 1}
    assert _ran(executions, f"get_weather {key}") == 1
    assert _ran(executions, f"slow_lookup {key}") == 2
