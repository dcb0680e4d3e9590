"""Tools of the child-task crash tests (tests/chaos/test_child_crashes.py): steps that
start a child task, then give up when they run again after their worker died."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.apps.tools import BEAT, read_executions, record
from tether import App, Child, StepContext, TerminalError

app = App("tests-children")


@app.tool(heartbeat=BEAT)
async def echo(ctx: StepContext, data: Any) -> Any:
    record(ctx)
    return data


@app.tool(heartbeat=BEAT)
async def delegates_then_refuses(ctx: StepContext, data: Any) -> Any:
    """Hands `data["steps"]` to a child task on its first run; any later run stops the
    task (TerminalError), as a step whose next attempt fails for good."""
    runs = read_executions(Path(os.environ["TETHER_TEST_EXECUTIONS"]))
    if runs[(ctx.task_id, ctx.step)]:
        raise TerminalError("refused on a second run")
    record(ctx)
    return Child(data["steps"])
