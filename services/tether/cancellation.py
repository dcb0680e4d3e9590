"""Cancellation that a NATS call swallowed, raised again by loops that must end."""

from __future__ import annotations

import asyncio


def raise_if_cancelled() -> None:
    """Raise CancelledError if the current task was cancelled and carried on anyway.

    On Python 3.11, `asyncio.wait_for` (under nats-py's `request`, `next_msg` and every
    KV and JetStream call) returns the result instead of raising when the cancel lands
    just as the reply arrives, and nats-py's flush catches CancelledError outright. A
    loop stopped by `cancel()` calls this once per turn, or it may run on forever.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
