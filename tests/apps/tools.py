"""Tools used by the tests; each execution is appended to $TETHER_TEST_EXECUTIONS."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from tether import (
    App,
    Child,
    NeedsInput,
    NextSteps,
    RetryableError,
    RetryPolicy,
    Sleep,
    Step,
    StepContext,
    TerminalError,
)

app = App("tests")
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.2, jitter=0.0)
APPROVAL = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}
BEAT = 0.5  # heartbeat (s): a killed worker's unheld steps come back after BEAT / 2 + 1 s


def record(ctx: StepContext, tag: str = "") -> None:
    """One line per execution: task, step (`<step>.b<branch>` for a branch of a parallel
    step), attempt, pid (one O_APPEND write: atomic)."""
    path = os.environ.get("TETHER_TEST_EXECUTIONS")
    if path:
        where = str(ctx.step) if ctx.branch is None else f"{ctx.step}.b{ctx.branch}"
        line = f"{ctx.task_id} {where} {ctx.attempt} {os.getpid()} {tag}\n".encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def read_executions(path: Path) -> Counter[tuple[str, int]]:
    """How many times each (task, step) started executing (branches: see below)."""
    counts: Counter[tuple[str, int]] = Counter()
    for line in path.read_text().splitlines():
        task_id, where, *_ = line.split()
        if ".b" not in where:
            counts[(task_id, int(where))] += 1
    return counts


def read_branch_executions(path: Path) -> Counter[tuple[str, int, int]]:
    """How many times each (task, step, branch) of a parallel step started executing."""
    counts: Counter[tuple[str, int, int]] = Counter()
    for line in path.read_text().splitlines():
        task_id, where, *_ = line.split()
        if ".b" in where:
            step, branch = where.split(".b")
            counts[(task_id, int(step), int(branch))] += 1
    return counts


class Query(msgspec.Struct):
    query: str
    limit: int = 3


CORPUS = {
    "AI trends 2026": ["agents run for hours", "durable execution matters", "MCP tasks"],
}


@app.tool(heartbeat=BEAT)
async def search(ctx: StepContext, q: Query) -> list[str]:
    """Search a tiny corpus."""
    record(ctx)
    return CORPUS.get(q.query, [f"no hits for {q.query}"])[: q.limit]


@app.tool(heartbeat=BEAT)
async def summarize(ctx: StepContext, hits: list[str]) -> str:
    record(ctx)
    return "; ".join(hits)


@app.tool(heartbeat=BEAT)
async def write_report(ctx: StepContext, summary: str) -> dict[str, Any]:
    record(ctx)
    earlier = await ctx.outputs()
    return {"report": f"# Report\n\n{summary}\n", "sources": len(earlier[0])}


@app.tool(heartbeat=BEAT)
async def fast(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    return {"step": ctx.step, "payload": data}


@app.tool(heartbeat=BEAT)
async def slow(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    seconds = data.get("sleep", 0.3) if isinstance(data, dict) else 0.3
    await asyncio.sleep(seconds)
    return {"step": ctx.step, "slept": seconds}


@app.tool(heartbeat=BEAT, retry=FAST_RETRY)
async def flaky(ctx: StepContext, data: Any) -> Any:
    """Fails until attempt `data['succeed_on']`."""
    record(ctx)
    if ctx.attempt < data["succeed_on"]:
        raise RetryableError(f"attempt {ctx.attempt} failed", retry_after=0.05)
    return {"attempt": ctx.attempt}


@app.tool(heartbeat=BEAT, retry=FAST_RETRY)
async def broken(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    raise ValueError("the service is down")


@app.tool(heartbeat=BEAT, retry=FAST_RETRY)
async def refuses(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    raise TerminalError("permission denied")


@app.tool(
    heartbeat=BEAT, retry=RetryPolicy(max_attempts=2, initial_backoff=0.05, jitter=0.0), timeout=0.3
)
async def hangs(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    await asyncio.sleep(60)


@app.tool(heartbeat=BEAT)
async def naps(ctx: StepContext, data: Any) -> Any:
    """Sleeps durably for `data["seconds"]` between this step and the next."""
    record(ctx)
    return Sleep(data["seconds"], output={"napped": data["seconds"], "at": time.time()})


@app.tool(heartbeat=BEAT)
async def clock(ctx: StepContext, data: Any) -> Any:
    """Returns when it ran, next to what it was given."""
    record(ctx)
    return {"given": data, "at": time.time()}


@app.tool(heartbeat=BEAT)
async def delegates(ctx: StepContext, data: Any) -> Any:
    """Hands `data["steps"]` to a child task; the child's result is this step's output."""
    record(ctx)
    return Child(data["steps"], metadata=data.get("metadata"))


@app.tool(heartbeat=BEAT)
async def asks_briefly(ctx: StepContext, data: Any) -> Any:
    """An approval that expires after `data["timeout"]` seconds."""
    record(ctx)
    return NeedsInput(prompt="Approve within the hour?", schema=APPROVAL, timeout=data["timeout"])


@app.tool(heartbeat=BEAT)
async def asks(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    return NeedsInput(prompt="Approve the draft?", schema=APPROVAL)


@app.tool(heartbeat=BEAT)
async def plans(ctx: StepContext, data: Any) -> Any:
    """Like an LLM turn: asks for two tool calls, then a final turn."""
    record(ctx)
    return NextSteps(
        output={"thought": "need two searches"},
        steps=[
            Step(tool="fast", input={"call": 1}),
            Step(tool="fast", input={"call": 2}),
            Step(tool="summarize", input=["a", "b"]),
        ],
    )


@app.tool(heartbeat=BEAT, retry=FAST_RETRY)
async def emails(ctx: StepContext, data: Any) -> Any:
    """Sends an 'email' once, then fails on the first attempt after the send."""
    record(ctx)

    async def send() -> str:
        record(ctx, "send")
        return f"sent-{ctx.attempt}"

    receipt = await ctx.once("send-email", send, type=str)
    if ctx.attempt == 1:
        raise RuntimeError("crash after sending")
    return {"receipt": receipt}


@app.tool(heartbeat=BEAT, retry=FAST_RETRY)
async def notifies(ctx: StepContext, data: Any) -> Any:
    """As the README writes it: a plain (sync) side effect in `ctx.once`, then a failure."""
    record(ctx)
    receipt = await ctx.once("notify", lambda: record(ctx, "send") or f"sent-{ctx.attempt}")
    if ctx.attempt < 3:
        raise RuntimeError("fails after notifying")
    return {"receipt": receipt}


@app.tool(heartbeat=BEAT, max_concurrency=2)
async def limited(ctx: StepContext, data: Any) -> Any:
    """Tracks how many run at once through marker files in $TETHER_TEST_RUNNING."""
    record(ctx)
    running = Path(os.environ["TETHER_TEST_RUNNING"])
    marker = running / f"{ctx.task_id}.{ctx.step}.{os.getpid()}"
    marker.touch()
    try:
        seen = len(list(running.glob("*.*.*")))
        with (running / "max").open("a") as out:
            out.write(f"{seen}\n")
        await asyncio.sleep(0.3)
    finally:
        marker.unlink()
    return {"ok": True}


@app.tool(heartbeat=BEAT)
async def gated(ctx: StepContext, data: Any) -> Any:
    """Fails for good until the file $TETHER_TEST_GATE exists (an outage someone fixes)."""
    record(ctx)
    if not Path(os.environ["TETHER_TEST_GATE"]).exists():
        raise TerminalError("the gate is closed")
    return {"passed": True, "input": data}


@app.tool(heartbeat=BEAT)
async def sized(ctx: StepContext, size: int) -> str:
    """Returns a string of `size` characters: an output of a chosen size from a tiny input."""
    record(ctx)
    return "x" * size


@app.tool(heartbeat=BEAT, retry=RetryPolicy(max_attempts=2))
async def dies_held(ctx: StepContext, data: Any) -> Any:
    """SIGKILLs its own worker once the step is held, on every attempt (an OOM loop)."""
    record(ctx)
    await asyncio.sleep(4 * BEAT)
    os.kill(os.getpid(), signal.SIGKILL)
