"""A LangGraph graph's worker killed (SIGKILL) in the middle of a tool node, and while its
task waits on an `interrupt()`: another worker picks the thread up at its last
checkpoint on JetStream, no finished model call is sent again, no finished tool (nor a
finished node of the super-step that was running) runs again, and the answer given with
`tether input` resumes the graph."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.apps.langgraph_agents import app as graphs
from tests.conftest import start_worker, stop_worker
from tests.e2e.test_cli_ops import tether
from tether import Client, NatsConfig, TaskStatus, Worker
from tether.integrations.langgraph.graph_saver import bucket_of
from tether.integrations.langgraph.saver import JetStreamSaver
from tether.nats.connection import close, connect
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow
APP = "tests.apps.langgraph_agents:app"


@pytest.fixture
async def registered(config: NatsConfig) -> None:
    """The graphs registered, with no worker left running."""
    async with Worker(graphs, config):
        pass


@pytest.fixture
def gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gates"
    path.mkdir()
    monkeypatch.setenv("TETHER_TEST_GATES", str(path))
    return path


def _turns(model: ScriptedModel, question: str) -> Counter[int]:
    return Counter(r["turn"] for r in model.requests(question))


def _ran(executions: Path) -> Counter[str]:
    return Counter(line.rsplit(" ", 1)[0] for line in executions.read_text().splitlines())


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


async def test_a_worker_killed_mid_tool_leaves_the_thread_for_another_to_finish(
    config: NatsConfig,
    client: Client,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    gates: Path,
    tmp_path: Path,
) -> None:
    key = f"k{uuid.uuid4().hex[:6]}"
    question = model.conversation(
        {"content": "Adding first.", **_call("add", a=2, b=3), "usage": _usage(50, 5)},
        {**_call("slow_lookup", key=key), "usage": _usage(70, 6)},
        {"content": "5, and 42.", "usage": _usage(90, 7)},
    )
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("lg_react", question)
        started = gates / f"{key}.started"
        await wait_until(started.exists, timeout=30, message="slow_lookup to start")
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    (gates / f"{key}.go").touch()

    async with Worker(graphs, config):
        assert await handle.wait(timeout=60) == "5, and 42."

    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    assert _ran(executions) == {"add 2 3": 1, f"slow_lookup {key}": 2}  # only the one in flight
    record = await handle.get()
    assert record.usage is not None  # the dead attempt's calls, counted by the one that won
    assert (record.usage.requests, record.usage.input_tokens) == (3, 210)
    assert record.usage.output_tokens == 18
    chunks = [c async for c in handle.stream()]
    won = max(c.attempt for c in chunks)
    assert won == 2
    text = "".join(c.delta for c in chunks if c.attempt == won)
    assert text == "Adding first.5, and 42."  # each model message's text once, as it won


async def test_an_interrupt_is_answered_with_tether_input_after_the_worker_restarted(
    config: NatsConfig,
    client: Client,
    registered: None,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
) -> None:
    city = f"c{uuid.uuid4().hex[:6]}"
    question = model.conversation(
        _call("add", a=1, b=2),
        _call("ask_human", question="Which city?"),
        {"content": f"3, in {city}."},
    )
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("lg_react", question)
        waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    assert waiting.input_request is not None and waiting.input_request.prompt == "Which city?"

    restarted = start_worker(config, APP, log=tmp_path / "restarted.log")
    try:
        answered = await tether(config, "input", handle.task_id, json.dumps(city))
        assert answered.code == 0, answered.err
        assert await handle.wait(timeout=60) == f"3, in {city}."
    finally:
        stop_worker(restarted)

    assert _turns(model, question) == {0: 1, 1: 1, 2: 1}
    assert _ran(executions) == {"add 1 2": 1, f"ask_human {city}": 1}
    assert model.requests(question)[2]["tool_texts"] == ["3", city]


async def test_a_finished_node_of_an_unfinished_super_step_does_not_run_again(
    config: NatsConfig,
    client: Client,
    registered: None,
    executions: Path,
    gates: Path,
    tmp_path: Path,
) -> None:
    key = f"k{uuid.uuid4().hex[:6]}"
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    try:
        handle = await client.submit_agent("lg_fanout", {"key": key})  # type: ignore[arg-type]
        await wait_until((gates / f"{key}.started").exists, timeout=30, message="gated to start")
        await wait_until(lambda: _quick_kept(config, handle.task_id), timeout=30, message="quick")
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
    (gates / f"{key}.go").touch()

    async with Worker(graphs, config):
        done = await handle.wait(timeout=60)

    assert done["key"] == key and sorted(done["done"]) == ["gated", "quick"]
    assert _ran(executions) == {f"quick {key}": 1, f"slow_lookup {key}": 2, f"join {key}": 1}


async def _quick_kept(config: NatsConfig, thread: str) -> bool:
    """Whether the thread's latest checkpoint holds the writes of the node `quick`."""
    nc = await connect(config)
    try:
        saver = JetStreamSaver(nc, bucket=bucket_of(config.names.prefix))
        found = await saver.aget_tuple({"configurable": {"thread_id": thread}})
    finally:
        await close(nc)
    return found is not None and any(v == ["quick"] for _, _, v in found.pending_writes or [])
