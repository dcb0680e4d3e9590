"""Followers survive a kill -9 and restart of nats-server: `handle.events()`,
`handle.stream()` and `tether watch` deliver every event and every token exactly once, in
order, and finish within seconds of the task's end."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import ROOT, start_worker, stop_worker
from tether import Client, Dispatcher, NatsConfig, NatsServer, TokenChunk
from tether.schemas import Names
from tether.schemas.events import AnyStatusEvent
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow
AGENTS = "tests.apps.agents:app"
WORDS = 80
ANSWER = " ".join(f"word{n}" for n in range(WORDS))
SEARCH = {"tool_calls": [{"name": "web_search", "arguments": {"query": "restarts"}}]}
FINISHED_WITHIN = 5.0


async def test_followers_resume_after_the_server_restarts_without_loss_or_repeat(
    tmp_path: Path, prefix: str, model: ScriptedModel
) -> None:
    model.load({"turns": [SEARCH, {"content": ANSWER}], "chunk_delay": 0.04})
    server = NatsServer(tmp_path / "nats").start()
    config = NatsConfig(url=server.url, names=Names(prefix=prefix))
    worker = watch = None
    try:
        async with Client(config) as client, Dispatcher(config):
            worker = start_worker(config, AGENTS, log=tmp_path / "worker.log")
            await wait_until(lambda: _registered(client), timeout=20, message="the agent's worker")
            handle = await client.submit_agent("researcher", "restart question")
            watch = _watch(config, handle.task_id, tmp_path / "watch.out")
            events: list[AnyStatusEvent] = []
            chunks: list[TokenChunk] = []
            ended: dict[str, float] = {}
            followers = [
                asyncio.create_task(_collect(handle.events(), events, ended, "events")),
                asyncio.create_task(_collect(handle.stream(), chunks, ended, "stream")),
            ]
            await wait_until(lambda: _some(chunks, 10), timeout=30, message="the answer streaming")
            out = tmp_path / "watch.out"  # `tether watch` is following too (connected)
            await wait_until(lambda: _printed(out), timeout=30, message="tether watch to print")
            server.kill()
            await asyncio.sleep(1.0)  # away for a while, not only a blink
            server.start()

            await handle.wait(timeout=60)
            done = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*followers), FINISHED_WITHIN)
            await asyncio.to_thread(watch.wait, FINISHED_WITHIN)
            assert max(ended.values()) - done < FINISHED_WITHIN

            history = [event async for event in handle.events(timeout=10)]
            stored = [chunk async for chunk in handle.stream()]
    finally:
        for process in (watch, worker):
            if process is not None and process.poll() is None:
                stop_worker(process)
        server.stop()

    assert events == history
    assert [c.stream_seq for c in chunks] == [c.stream_seq for c in stored]
    assert chunks == stored
    assert watch.returncode == 0, (tmp_path / "watch.out").read_text()
    lines = (tmp_path / "watch.out").read_text().splitlines()
    printed = [msgspec.json.decode(line) for line in lines]
    shown = [e for e in printed if e["event"] != "text"]
    assert [(e["event"], e["step"], e["attempt"]) for e in shown] == [
        (e.kind, e.step, e.attempt) for e in history
    ]
    assert history[-1].kind == "completed"
    last = chunks[-1]
    text = "".join(c.delta for c in chunks if (c.step, c.attempt) == (last.step, last.attempt))
    assert last.done and text.endswith(f"word{WORDS - 1}")
    texts = [e["text"] for e in printed if e["event"] == "text"]
    assert texts[-1] == text  # the answer, whole, across the restart


async def _collect(feed: Any, into: list[Any], ended: dict[str, float], name: str) -> None:
    async for item in feed:
        into.append(item)
    ended[name] = time.monotonic()


async def _some(items: list[Any], count: int) -> bool:
    return len(items) >= count


async def _printed(out: Path) -> bool:
    return out.exists() and out.stat().st_size > 0


async def _registered(client: Client) -> bool:
    return await client._store.tools.get("researcher") is not None


def _watch(config: NatsConfig, task_id: str, out: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tether.cli", "watch", task_id, "--json"]
    command += ["--nats", config.url, "--prefix", config.names.prefix]
    with out.open("wb") as stdout:
        return subprocess.Popen(
            command, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=stdout
        )
