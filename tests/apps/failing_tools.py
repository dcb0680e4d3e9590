"""Two apps for a parallel step whose branches run in different workers: one branch
fails the task (`app`), the others sleep long in a worker of their own (`bystanders`)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.apps.tools import BEAT, record
from tether import App, StepContext, TerminalError

app = App("failing")
bystanders = App("bystanders")


@app.tool(heartbeat=BEAT)
async def denies(ctx: StepContext, data: Any) -> Any:
    """Fails the task at once."""
    record(ctx)
    raise TerminalError("access denied")


@bystanders.tool(heartbeat=BEAT)
async def lingers(ctx: StepContext, data: Any) -> Any:
    """Sleeps `data["sleep"]` seconds; a step stopped meanwhile says so (tag `stopped`)."""
    record(ctx)
    try:
        await asyncio.sleep(data["sleep"])
    except asyncio.CancelledError:
        record(ctx, "stopped")
        raise
    record(ctx, "woke")
    return {"slept": data["sleep"]}
