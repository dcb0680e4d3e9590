"""The drain of its build's last worker, against a real server: a step pinned to the
build may still be on its tool's shared subject (published while one build served the
tool, or taken by a fetch given up as the drain began). While another build serves the
tool, its workers send such a step on to this build, so the drain waits until the
shared subject holds nothing stored before it began, for as long as such a step takes to
come back; steps stored after do not hold it, and with no other build to send them on,
nothing there does."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from tether.deploys.routing import Fleet
from tether.nats.consumers import ConsumerOptions
from tether.nats.store import Store
from tether.schemas.work import WorkMessage
from tether.testing import wait_until
from tether.worker.draining import Drain

TOOL = "count"


@dataclass
class _View:
    """What the drain reads of a `FleetView`: its sum of the fleet."""

    fleet: Fleet


def _fleet(other_build_serves: bool) -> Fleet:
    serving = {"v1": False, **({"v2": True} if other_build_serves else {})}
    return Fleet(serving={TOOL: serving})


async def _step_on_shared_subject(store: Store) -> None:
    work = WorkMessage(task_id=uuid.uuid4().hex, step=1, tool=TOOL, input=3, generation=1)
    assert await store.publish_work(work, f"{work.task_id}.1")


async def _draining(
    store: Store, other_build_serves: bool, shared_wait: float = 10.0
) -> asyncio.Task[None]:
    drain = Drain("v1", [TOOL], shared_wait)
    drain.follow(store, _View(_fleet(other_build_serves)))  # type: ignore[arg-type]
    drain.started.set()
    return asyncio.create_task(drain.wait(busy=lambda: False, lost=lambda: False))


async def _take_one(store: Store) -> None:
    """What a worker of the other build does with it: take it, send it on, acknowledge."""
    consumer = await store.tool_consumer(TOOL, ConsumerOptions())
    (delivery,) = await consumer.fetch(1, 5)
    await delivery.done()
    await store.finish_writes()


async def test_the_last_worker_waits_for_a_step_on_the_shared_subject_another_build_sends_on(
    store: Store,
) -> None:
    await store.tool_consumer(TOOL, ConsumerOptions())
    await _step_on_shared_subject(store)
    drain = await _draining(store, other_build_serves=True)
    try:
        # four looks, twice what a drain with nothing left needs
        done, _ = await asyncio.wait({drain}, timeout=4 * 0.25 + 0.5)
        assert not done, "the drain ended with a step pinned here still on the shared subject"
        await _step_on_shared_subject(store)  # a new task's step, after the drain began
        await _take_one(store)
        await wait_until(drain.done, timeout=10, message="the drain ends once it was sent on")
    finally:
        drain.cancel()


async def test_with_no_other_build_a_step_on_the_shared_subject_waits_for_the_next_worker(
    store: Store,
) -> None:
    await store.tool_consumer(TOOL, ConsumerOptions())
    await _step_on_shared_subject(store)
    drain = await _draining(store, other_build_serves=False)
    try:
        await wait_until(drain.done, timeout=10, message="the drain ends: no one sends it on")
    finally:
        drain.cancel()


async def test_a_step_that_does_not_come_back_within_the_wait_does_not_hold_the_drain(
    store: Store,
) -> None:
    """One retried later (a tool's backoff) keeps the shared subject's floor back: the
    drain waits no longer than such a step takes to come back."""
    await store.tool_consumer(TOOL, ConsumerOptions())
    await _step_on_shared_subject(store)
    drain = await _draining(store, other_build_serves=True, shared_wait=1.0)
    try:
        await wait_until(drain.done, timeout=10, message="the drain ends after its wait")
    finally:
        drain.cancel()
