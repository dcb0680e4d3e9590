"""Streamed text as MCP progress: a client that waits on a plain `tools/call` with a
`progressToken` gets each piece of an agent's answer as a `notifications/progress`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from tether.gateway.backend import TaskBackend

log = logging.getLogger(__name__)
DRAIN = 2.0
"""Seconds the result waits for the progress still on its way (a waiting task's text
does not end: then the result goes without it)."""


@contextlib.asynccontextmanager
async def token_progress(backend: TaskBackend, ctx: Any, task_id: str) -> AsyncIterator[None]:
    """While the body runs, send the task's text to the caller as progress (if it asked)."""
    meta = (ctx.params or {}).get("_meta") or {}
    if meta.get("progressToken") is None:
        yield
        return
    reporter = asyncio.create_task(_report(backend, ctx, task_id))
    try:
        yield
        # The text ends before the task does: let the last pieces out before the result.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reporter), DRAIN)
    finally:
        reporter.cancel()
        await asyncio.gather(reporter, return_exceptions=True)


async def _report(backend: TaskBackend, ctx: Any, task_id: str) -> None:
    sent = 0
    try:
        async for chunk in backend.client.handle(task_id).stream():
            if chunk.delta:
                sent += 1
                await ctx.session.report_progress(sent, None, chunk.delta)
    except Exception as exc:  # the session went away, or NATS did: the call goes on
        log.debug("stopped streaming task %s as progress: %s", task_id, exc)
