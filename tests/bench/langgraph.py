"""The LangGraph saver's growth: one thread of 200 super-steps on `JetStreamSaver`, each
appending one small message, with the bytes the KV stream holds after every super-step
and the time of reading the thread's latest checkpoint at steps 10, 50, 100 and 200.

What should hold (issue 42): the bytes a super-step adds and the time of `get_tuple`
stay the same from step 10 to step 200, because the saver keeps one value per channel
version and reads a checkpoint in a fixed number of reads. A channel whose value is the
whole conversation (`add_messages`) is stored whole at each version, as LangGraph's other
savers store it: that variant grows by design; `DeltaChannel` (LangGraph's beta answer
to it) stores the new message only, and a snapshot every 100 updates.

    python -m tests.bench.langgraph [--runs 3] [--nats URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated, Any, TypedDict

import nats
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages

from tests.bench.history import commit
from tests.bench.processes import ROOT
from tether import NatsServer
from tether.integrations.langgraph import JetStreamSaver
from tether.nats.server import find_nats_server

STEPS = 200
SAMPLES = (10, 50, 100, 200)
CALLS = 200
"""Reads timed at each sample; the figure is their median."""
WINDOW = 10
"""Bytes per step at a sample are also given as the median of the `WINDOW` steps up to it:
a single step can hold a snapshot (`DeltaChannel`) or a longer timestamp."""


class Plain(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    count: int


class Delta(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]
    count: int


VARIANTS: dict[str, type[Any]] = {"add_messages": Plain, "DeltaChannel": Delta}


def build(schema: type[Any]) -> StateGraph[Any]:
    """One node that appends one small message and loops to itself until `STEPS`."""

    def talk(state: Any) -> dict[str, Any]:
        n = state["count"] + 1
        text = f"step {n}: looked it up, the answer is {n * 7}."
        return {"messages": [AIMessage(content=text, id=f"m-{n}")], "count": n}

    def route(state: Any) -> str:
        return "talk" if state["count"] < STEPS else END

    graph = StateGraph(schema)
    graph.add_node("talk", talk)
    graph.add_edge(START, "talk")
    graph.add_conditional_edges("talk", route, ["talk", END])
    return graph


class SampledSaver(JetStreamSaver):
    """`JetStreamSaver` calling `on_step(count)` once a checkpoint and the writes it was
    made from are stored (LangGraph does not wait for the writes); count 0 is the input."""

    on_step: Callable[[int], Awaitable[None]] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._writing: set[asyncio.Future[None]] = set()

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writing.add(done)
        try:
            await super().aput_writes(config, writes, task_id, task_path)
        finally:
            self._writing.discard(done)
            done.set_result(None)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = await super().aput(config, checkpoint, metadata, new_versions)
        await asyncio.gather(*self._writing)
        count = checkpoint["channel_values"].get("count")
        if self.on_step is not None and isinstance(count, int):
            await self.on_step(count)
        return stored


async def timed(call: Callable[[], Awaitable[object]], calls: int = CALLS) -> float:
    """The median of `calls` timings of `call`, in milliseconds."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def run_variant(url: str, name: str) -> dict[str, Any]:
    """One thread of `STEPS` super-steps in a bucket of its own: stream bytes after each
    step, and read latencies at each of `SAMPLES`."""
    bucket = f"bench-lg-{uuid.uuid4().hex[:8]}"
    thread: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
    stored: dict[int, int] = {}
    reads: dict[int, dict[str, float]] = {}
    nc = await nats.connect(url)
    js = nc.jetstream()
    async with SampledSaver.from_conn_string(url, bucket=bucket) as saver:
        assert isinstance(saver, SampledSaver)
        await saver.asetup()
        graph = build(VARIANTS[name]).compile(checkpointer=saver)

        count_now = [0]

        async def latest() -> None:
            assert await saver.aget_tuple(thread) is not None

        async def newest_listed() -> None:
            assert len([t async for t in saver.alist(thread, limit=1)]) == 1

        async def state() -> None:
            assert len((await graph.aget_state(thread)).values["messages"]) == count_now[0]

        async def on_step(count: int) -> None:
            info = await js.stream_info(f"KV_{bucket}")
            stored[count] = info.state.bytes
            count_now[0] = count
            if count in SAMPLES:
                reads[count] = {
                    "get_tuple_ms": await timed(latest),
                    "list_limit1_ms": await timed(newest_listed),
                    "get_state_ms": await timed(state, CALLS // 4),
                }

        saver.on_step = on_step
        started = time.perf_counter()
        await graph.ainvoke(
            {"messages": [], "count": 0},
            {**thread, "recursion_limit": STEPS + 10},
            durability="sync",
        )
        elapsed = time.perf_counter() - started
        final = await js.stream_info(f"KV_{bucket}")
        done = await saver.aget_tuple(thread)
        assert done is not None and done.checkpoint["channel_values"]["count"] == STEPS
    await nc.close()
    return figures(name, stored, reads, final.state.bytes, final.state.messages, elapsed)


def figures(
    name: str,
    stored: dict[int, int],
    reads: dict[int, dict[str, float]],
    total: int,
    messages: int,
    elapsed: float,
) -> dict[str, Any]:
    assert sorted(stored) == list(range(STEPS + 1)), "a super-step was not sampled"
    added = {n: stored[n] - stored[n - 1] for n in range(1, STEPS + 1)}
    steps = {
        str(n): {
            "stored_bytes": stored[n],
            "added_bytes": added[n],
            "added_bytes_window": statistics.median(added[k] for k in range(n - WINDOW + 1, n + 1)),
            **reads[n],
        }
        for n in SAMPLES
    }
    return {
        "variant": name,
        "steps": steps,
        "stream_bytes": total,
        "stream_messages": messages,
        "run_s": elapsed,
        # the test that makes every figure above meaningful: the run ended where it began
        # its samples, with nothing written after the last super-step
        "stored_after_run_equals_last_sample": total == stored[STEPS],
    }


async def measure(url: str | None = None) -> dict[str, Any]:
    """Both variants on `url`, or on a nats-server of its own (file storage) when None."""
    if url is not None:
        return {"variants": [await run_variant(url, name) for name in VARIANTS]}
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-lg-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        return await measure(server.url)


def machine() -> dict[str, Any]:
    server = subprocess.run([find_nats_server(), "--version"], capture_output=True, text=True)
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "nats_server": server.stdout.strip(),
        "load": list(os.getloadavg()),
    }


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each figure of each variant, the median over `runs`."""
    merged = []
    for i, first in enumerate(runs[0]["variants"]):
        steps = {
            step: {
                key: statistics.median(run["variants"][i]["steps"][step][key] for run in runs)
                for key in values
            }
            for step, values in first["steps"].items()
        }
        first_step, last_step = str(SAMPLES[0]), str(SAMPLES[-1])
        growth = {
            key: steps[last_step][key] / steps[first_step][key]
            for key in ("added_bytes_window", "get_tuple_ms", "list_limit1_ms", "get_state_ms")
        }
        merged.append({"variant": first["variant"], "steps": steps, "step200_over_step10": growth})
    return merged


def table(variants: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | step | stored bytes | added by the step | added (median of 10) "
        "| get_tuple ms | list(limit=1) ms | get_state ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in variants:
        for step, f in variant["steps"].items():
            lines.append(
                f"| {variant['variant']} | {step} | {f['stored_bytes']:.0f} "
                f"| {f['added_bytes']:.0f} | {f['added_bytes_window']:.0f} "
                f"| {f['get_tuple_ms']:.2f} | {f['list_limit1_ms']:.2f} "
                f"| {f['get_state_ms']:.2f} |"
            )
    lines.append("")
    for variant in variants:
        growth = ", ".join(f"{k} {v:.2f}x" for k, v in variant["step200_over_step10"].items())
        lines.append(f"{variant['variant']}, step {SAMPLES[-1]} over step {SAMPLES[0]}: {growth}")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    load = list(os.getloadavg())
    runs = [await measure(args.nats) for _ in range(args.runs)]
    merged = medians(runs)
    print(f"{STEPS} super-steps of one thread, medians of {args.runs} run(s):\n")
    print(table(merged))
    sha, dirty = commit(ROOT)
    line = {
        "bench": "langgraph saver growth",
        "langgraph": package_version("langgraph"),
        "langgraph_checkpoint": package_version("langgraph-checkpoint"),
        "commit": sha,
        "dirty": dirty,
        "machine": {**machine(), "load_before": load},
        "runs": args.runs,
        "medians": merged,
        "each_run": runs,
    }
    print(json.dumps(line))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs; the table shows medians")
    parser.add_argument("--nats", default=None, help="a running server (default: its own)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
