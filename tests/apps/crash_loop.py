"""Tools for the crash tests: a poison input kills its worker at once (an OOM loop, a
crash in native code), and a nap that records when it started; each execution is
appended to $TETHER_TEST_EXECUTIONS."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from tests.apps.tools import BEAT, record
from tether import App, RetryPolicy, StepContext

app = App("crash-loop")


@app.tool(heartbeat=BEAT, retry=RetryPolicy(max_attempts=5, initial_backoff=0.05, jitter=0.0))
async def chore(ctx: StepContext, data: dict[str, Any]) -> dict[str, Any]:
    record(ctx)
    if data.get("poison"):
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(data.get("sleep", 0.3))
    return {"done": True}


@app.tool(heartbeat=BEAT)
async def nap(ctx: StepContext, data: dict[str, Any]) -> int:
    record(ctx, f"{time.time():.3f}")  # when it started, to tell runs at once from in turn
    await asyncio.sleep(data["sleep"])
    return ctx.attempt
