"""The agent workloads of `just bench`, on the scripted model (its own process):

- W7: a long agent (one tool call per turn): the bytes Tether writes to JetStream for
  turn 5 and for turn 100, counted on the wire (record, checkpoints, events, work
  messages and streamed text), so a flat ratio means per-turn cost does not grow.
- W8: a streamed answer, read straight from the model with the `openai` client and
  through Tether (`handle.stream()`, a worker process in between): tokens per second.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import nats
import openai

from tether import Agent, App, Client, NatsConfig, OpenAIModel, StepContext
from tether.schemas.names import DEFAULT_NAMES as NAMES
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
LONG_TURNS = 100
SAMPLE_TURNS = (5, LONG_TURNS)
STREAM_WORDS = 2000

app = App("bench-agents")


@app.tool
async def echo(ctx: StepContext, data: dict[str, Any]) -> dict[str, Any]:
    """Return the arguments."""
    return data


long_agent = app.add(
    Agent(
        "long_agent",
        model=OpenAIModel("scripted", api_key="bench"),
        tools=["echo"],
        max_turns=LONG_TURNS + 1,
    )
)


def script() -> dict[str, Any]:
    turns = [
        {"content": f"turn {k}", "tool_calls": [{"name": "echo", "arguments": {"turn": k}}]}
        for k in range(LONG_TURNS)
    ]
    words = " ".join(f"w{i}" for i in range(STREAM_WORDS))
    return {
        "conversations": [
            {"match": "long", "turns": [*turns, {"content": "done"}]},
            {"match": "stream", "turns": [{"content": words}]},
        ]
    }


def _turn_of(step: int) -> int:
    """LLM turn k (1-based) is step 2(k-1); its tool calls are the group after it."""
    return step // 2 + 1


async def bytes_per_turn(url: str) -> dict[str, float]:
    """W7: bytes written per turn, seen on the wire by a subscriber of every write."""
    nc = await nats.connect(url)
    task_id = f"w7-long-{uuid.uuid4().hex[:8]}"
    written: Counter[int] = Counter()
    done = asyncio.Event()

    async def record(msg: Any) -> None:
        value = msgspec.json.decode(msg.data)
        written[_turn_of(max(0, value["current_step"] - 1))] += len(msg.data)
        if value["status"] in ("completed", "failed"):
            done.set()

    async def stepped(msg: Any) -> None:
        step = msgspec.json.decode(msg.data).get("step")
        written[_turn_of(step or 0)] += len(msg.data)

    async def checkpoint(msg: Any) -> None:
        key = msg.subject.split(f"{task_id}.", 1)[1]
        written[_turn_of(int(key.split(".")[0]))] += len(msg.data)

    await nc.subscribe(f"$KV.{NAMES.tasks_bucket}.{task_id}", cb=record)
    await nc.subscribe(f"$KV.{NAMES.checkpoints_bucket}.{task_id}.>", cb=checkpoint)
    for subject in (NAMES.status_subject(task_id), NAMES.tokens_subject(task_id)):
        await nc.subscribe(subject, cb=stepped)
    for tool in ("echo", "long_agent"):
        await nc.subscribe(NAMES.work_subject(tool), cb=stepped)
    await nc.flush()
    async with Client(NatsConfig(url=url)) as client:
        handle = await client.submit_agent("long_agent", "long", task_id=task_id)
        await asyncio.wait_for(done.wait(), timeout=600)
        assert await handle.wait(timeout=5) == "done"
    await nc.close()
    first, last = (written[k] for k in SAMPLE_TURNS)
    return {"bytes_at_turn_5": first, "bytes_at_turn_100": last, "turn_100_vs_turn_5": last / first}


async def direct_tokens_per_s(base_url: str) -> float:
    """W8 straight from the model: the `openai` client, one streamed request."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0) as model:
        stream = await model.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "stream"}], stream=True
        )
        return await _rate(
            chunk.choices[0].delta.content async for chunk in stream if chunk.choices
        )


async def tether_tokens_per_s(url: str) -> float:
    """W8 through Tether: the worker streams to JetStream, the client follows the task."""
    async with Client(NatsConfig(url=url)) as client:
        handle = await client.submit_agent("long_agent", f"stream {uuid.uuid4().hex[:6]}")
        return await _rate(chunk.delta async for chunk in handle.stream())


async def _rate(pieces: Any) -> float:
    """Tokens (the script's words) per second, from the first piece of text to the last:
    Tether sends text in batches, so pieces are not counted, words are."""
    words, first, last = 0, None, 0.0
    async for piece in pieces:
        if not piece:
            continue
        last = time.perf_counter()  # not the loop's end: a follower ends after the task
        if first is None:  # the rate runs from the first piece's arrival
            first = last
        else:
            words += len(piece.split())
    assert first is not None and words >= STREAM_WORDS / 2, words
    return words / (last - first)


class AgentWorker:
    """`tether worker tests.bench.agents:app` as its own process."""

    def __init__(self, url: str, base_url: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": base_url}
        command = [sys.executable, "-m", "tether.cli", "worker", "tests.bench.agents:app"]
        self.process = subprocess.Popen(
            [*command, "--nats", url],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def ready(self, url: str) -> None:
        async with Client(NatsConfig(url=url)) as client:
            await wait_until(
                lambda: _registered(client), timeout=30, message="the agent worker to start"
            )

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


async def _registered(client: Client) -> bool:
    return await client._store.tools.get("long_agent") is not None


async def measure(url: str, runs: int) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """W7 and W8 figures of each run."""
    long_runs, stream_runs = [], []
    with ScriptedModel(script(), chunk_delay=0.0) as model:
        worker = AgentWorker(url, model.base_url)
        try:
            await worker.ready(url)
            for _ in range(runs):
                long_runs.append(await bytes_per_turn(url))
                direct = await direct_tokens_per_s(model.base_url)
                through = await tether_tokens_per_s(url)
                stream_runs.append(
                    {
                        "direct_tokens_per_s": direct,
                        "tether_tokens_per_s": through,
                        "tether_vs_direct": through / direct,
                    }
                )
        finally:
            worker.stop()
    return long_runs, stream_runs
