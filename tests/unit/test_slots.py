"""A fetch loop's places (`tether.worker.serving.Slots`): many taken in one step, first
come first served, none lost to a cancelled taker."""

from __future__ import annotations

import asyncio

import pytest

from tether.worker.serving import Slots


async def test_takes_every_free_place_up_to_the_most_asked_in_one_call() -> None:
    slots = Slots(5)
    assert await slots.take(3) == 3
    assert await slots.take(10) == 2
    assert slots.free == 0


async def test_a_taker_waits_for_a_place_and_gets_the_one_given_back() -> None:
    slots = Slots(1)
    assert await slots.take(1) == 1
    waiting = asyncio.ensure_future(slots.take(4))
    await asyncio.sleep(0)
    assert not waiting.done()
    slots.give(3)
    assert await asyncio.wait_for(waiting, 1) == 3  # the one handed, then the two free
    assert slots.free == 0


async def test_takers_are_served_in_their_order_and_a_later_one_does_not_jump_ahead() -> None:
    slots = Slots(1)
    await slots.take(1)
    first = asyncio.ensure_future(slots.take(1))
    second = asyncio.ensure_future(slots.take(1))
    await asyncio.sleep(0)
    slots.give(1)
    assert await asyncio.wait_for(first, 1) == 1
    assert not second.done()
    # a newcomer while `second` waits queues behind it, even with a place free
    slots.give(1)
    assert await asyncio.wait_for(second, 1) == 1


async def test_a_cancelled_taker_loses_no_place() -> None:
    slots = Slots(1)
    await slots.take(1)
    cancelled = asyncio.ensure_future(slots.take(1))
    behind = asyncio.ensure_future(slots.take(1))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    slots.give(1)
    assert await asyncio.wait_for(behind, 1) == 1
    slots.give(1)
    assert slots.free == 1


async def test_a_taker_cancelled_after_it_was_handed_a_place_gives_it_back() -> None:
    slots = Slots(1)
    await slots.take(1)
    handed = asyncio.ensure_future(slots.take(1))
    await asyncio.sleep(0)
    slots.give(1)  # handed to the waiter, which has not woken yet
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert slots.free == 1


async def test_a_taker_cancelled_and_passed_over_before_it_woke_raises_cancelled() -> None:
    slots = Slots(1)
    await slots.take(1)
    cancelled = asyncio.ensure_future(slots.take(1))
    await asyncio.sleep(0)
    cancelled.cancel()
    slots.give(1)  # passes over the cancelled taker, which has not woken yet
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert slots.free == 1
