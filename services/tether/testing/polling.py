"""Poll for a condition with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.05
) -> T:
    """Call `check` until it returns without raising AssertionError; re-raise the last one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(interval)


async def wait_until(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "condition",
) -> None:
    """Wait until `condition()` is true; raise AssertionError naming it after `timeout`."""

    async def check() -> None:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        assert result, f"{message} not reached within {timeout}s"

    await eventually(check, timeout, interval)
