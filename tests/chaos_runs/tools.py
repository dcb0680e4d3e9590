"""The app the chaos runs serve; every execution is appended to $CHAOS_EXECUTIONS."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from tether import App, NeedsInput, RetryableError, RetryPolicy, Sleep, StepContext

APP = "tests.chaos_runs.tools:app"
EXECUTIONS_ENV = "CHAOS_EXECUTIONS"
BEAT = 1.0
"""Heartbeat (s), Tether's default, so that the runs see what users' tools get: a
killed worker's steps are redelivered after the ack wait, 5 x BEAT."""
QUICK_RETRY = RetryPolicy(max_attempts=5, initial_backoff=0.2, max_backoff=1.0, jitter=0.0)
APPROVAL = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}

app = App("chaos")


def record(ctx: StepContext) -> None:
    """One line per execution, written as the tool starts: task, step (`<step>.b<branch>`
    for a branch), attempt, pid and wall-clock time (one O_APPEND write: atomic)."""
    path = os.environ.get(EXECUTIONS_ENV)
    if not path:
        return
    where = str(ctx.step) if ctx.branch is None else f"{ctx.step}.b{ctx.branch}"
    line = f"{ctx.task_id} {where} {ctx.attempt} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _seconds(data: Any, key: str, default: float = 0.0) -> float:
    return float(data.get(key, default)) if isinstance(data, dict) else default


@app.tool(heartbeat=BEAT)
async def fetch(ctx: StepContext, data: Any) -> Any:
    """A first step: returns what it was given."""
    record(ctx)
    return {"fetched": data}


@app.tool(heartbeat=BEAT)
async def think(ctx: StepContext, data: Any) -> Any:
    """A middle step that may take a while (`{"sleep": seconds}` in the task's input)."""
    record(ctx)
    pause = _seconds(data.get("fetched") if isinstance(data, dict) else None, "sleep")
    if pause:
        await asyncio.sleep(pause)
    return {"thought": data, "slept": pause}


@app.tool(heartbeat=BEAT)
async def write(ctx: StepContext, data: Any) -> Any:
    """A last step: its output is the task's result."""
    record(ctx)
    return {"written": ctx.step}


@app.tool(heartbeat=BEAT)
async def nap(ctx: StepContext, data: Any) -> Any:
    """Sleeps durably for `data["seconds"]` before the next step."""
    record(ctx)
    return Sleep(_seconds(data, "seconds", 1.0), output={"napped": True})


@app.tool(heartbeat=BEAT)
async def branch(ctx: StepContext, data: Any) -> Any:
    """One branch of a fan-out."""
    record(ctx)
    await asyncio.sleep(_seconds(data, "sleep"))
    return {"branch": ctx.branch}


@app.tool(heartbeat=BEAT, retry=QUICK_RETRY)
async def flaky(ctx: StepContext, data: Any) -> Any:
    """Fails its first attempt, then succeeds."""
    record(ctx)
    if ctx.attempt == 1:
        raise RetryableError("the first attempt always fails", retry_after=0.2)
    return {"attempt": ctx.attempt}


@app.tool(heartbeat=BEAT)
async def hold(ctx: StepContext, data: Any) -> Any:
    """Runs for `data["seconds"]`: long enough to be cancelled while it runs."""
    record(ctx)
    await asyncio.sleep(_seconds(data, "seconds", 60.0))
    return {"held": True}


@app.tool(heartbeat=BEAT)
async def ask(ctx: StepContext, data: Any) -> Any:
    """Waits for an approval; the answer is this step's output."""
    record(ctx)
    return NeedsInput(prompt="Approve?", schema=APPROVAL)
