"""`StopClock`: a stop's deadline, cut short by a second signal."""

from __future__ import annotations

import asyncio

from tether.worker.stopping import StopClock


async def test_a_wait_ends_when_its_futures_are_done() -> None:
    clock = StopClock(60.0, grace=0.0)
    done = asyncio.ensure_future(asyncio.sleep(0.01))
    assert await asyncio.wait_for(clock.wait({done}), 5) == set()


async def test_a_wait_under_way_ends_at_the_grace_once_hurried() -> None:
    clock = StopClock(60.0, grace=0.05)
    step = asyncio.ensure_future(asyncio.sleep(60))
    waiting = asyncio.ensure_future(clock.wait({step}))
    await asyncio.sleep(0)  # the wait is under way
    clock.hurry()
    assert await asyncio.wait_for(waiting, 5) == {step}
    assert clock.left() == 0.0
    step.cancel()


async def test_hurry_never_lengthens_a_stop() -> None:
    clock = StopClock(0.0, grace=60.0)
    clock.hurry()
    assert clock.left() == 0.0
