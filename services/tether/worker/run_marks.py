"""The I/O of counting attempts (see `runs`): read a step's last run where a delivery
came back, and leave the `StepRun` that makes an attempt count."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tether.clock import utcnow
from tether.nats.delivery import Delivery
from tether.nats.feeds import last_event
from tether.nats.store import Store
from tether.schemas.tasks import StepRun, WorkMessage
from tether.worker import runs
from tether.worker.heartbeats import StepHeartbeat

Mark = Callable[[bool], Awaitable[None]]


async def count(store: Store, delivery: Delivery, work: WorkMessage) -> runs.Count:
    """Which attempt this delivery runs (set on it): its step's last run is read only for
    a delivery that came back, so a first delivery costs nothing."""
    prior, delivered = delivery.prior, delivery.delivered
    last = None
    if runs.needs_look(prior, delivered):
        last = await store.heartbeats.run_of(work.task_id, work.step, work.branch)
        if last is None or last.generation != work.generation:
            last = runs.started_by_event(await last_event(store, work.task_id), work, prior)
    counted = runs.count(prior, delivered, delivery.stream_sequence, work.generation, last)
    delivery.count(counted.attempt)
    return counted


async def started(
    store: Store,
    delivery: Delivery,
    heartbeat: StepHeartbeat,
    work: WorkMessage,
    counted: runs.Count,
) -> Mark:
    """Make the attempt count: its `StepRun` now, on a delivery that came back; with the
    first beat on a first delivery (one that ends sooner never counts). Returns the mark,
    for a failure to say the step goes back."""
    mark = marker(store, delivery, work, counted)
    if runs.needs_look(delivery.prior, delivery.delivered):
        await mark(True)
    else:
        heartbeat.mark = lambda: mark(True)
    return mark


def marker(store: Store, delivery: Delivery, work: WorkMessage, counted: runs.Count) -> Mark:
    """Writes the step's `StepRun`: `running` (the attempt started), or not (it failed
    and goes back, so the next delivery is the next attempt, not a death)."""

    async def mark(running: bool) -> None:
        run = StepRun(
            generation=work.generation,
            attempt=counted.attempt,
            sequence=delivery.stream_sequence,
            delivered=delivery.delivered,
            running=running,
            deaths=counted.deaths,
            time=utcnow(),
        )
        await store.heartbeats.put_run(work.task_id, work.step, work.branch, run)

    return mark
