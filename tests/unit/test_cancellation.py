"""Loops stopped by cancel() end even when a NATS call inside them ate the cancellation."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import cast

import pytest

from tether.cancellation import raise_if_cancelled
from tether.nats.delivery import Delivery
from tether.nats.store import Store
from tether.worker.heartbeats import StepHeartbeat


class SwallowingDelivery:
    """`extend` (in_progress) that returns normally when cancelled, as a NATS call can: Python
    3.11's `wait_for` does when the reply is in, and nats-py's flush always does."""

    subject = "tether.work.slow"
    held = False  # a step that keeps its message (no custody)

    def __init__(self) -> None:
        self.beats = 0
        self.in_call = asyncio.Event()
        self.swallow = True

    async def extend(self) -> None:
        self.beats += 1
        self.in_call.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if not self.swallow:
                raise


async def test_a_heartbeat_cancelled_inside_a_call_that_swallows_it_still_stops() -> None:
    msg = SwallowingDelivery()
    heartbeat = StepHeartbeat(cast(Delivery, msg), cast(Store, None), timedelta(milliseconds=1))

    await heartbeat.__aenter__()
    await asyncio.wait_for(msg.in_call.wait(), timeout=5)
    stopping = asyncio.ensure_future(heartbeat.__aexit__(None, None, None))
    done, _ = await asyncio.wait({stopping}, timeout=5)
    msg.swallow = False  # so that a loop which missed its cancel can still be ended here
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping

    assert stopping in done, "the heartbeat loop ran on after its step settled"
    assert msg.beats == 1


async def test_raise_if_cancelled_raises_the_cancel_a_call_swallowed() -> None:
    msg = SwallowingDelivery()

    async def one_turn() -> str:
        await msg.extend()
        raise_if_cancelled()
        return "ran on"

    turn = asyncio.create_task(one_turn())
    await asyncio.wait_for(msg.in_call.wait(), timeout=5)
    turn.cancel()

    with pytest.raises(asyncio.CancelledError):
        await turn
