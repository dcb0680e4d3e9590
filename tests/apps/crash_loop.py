"""A tool whose poison input kills its worker at once (an OOM loop, a crash in native
code), for the crash-loop tests; each execution is appended to $TETHER_TEST_EXECUTIONS."""

from __future__ import annotations

import asyncio
import os
import signal
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
