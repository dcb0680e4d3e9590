"""A tool that blocks its worker's event loop, as one calling blocking code does: first
held (its worker beats for it), then `time.sleep` for `data["block"]` seconds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.apps.tools import BEAT, record
from tether import App, StepContext

app = App("blocking")


@app.tool(heartbeat=BEAT)
async def block(ctx: StepContext, data: dict[str, Any]) -> dict[str, Any]:
    record(ctx)
    await asyncio.sleep(1.0)  # held by now: only a survivor could run it again
    time.sleep(data["block"])  # noqa: ASYNC251  # the point: the loop turns not at all
    return {"blocked": data["block"]}
