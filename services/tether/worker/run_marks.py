"""The I/O of counting attempts (see `runs`): read a step's last run where a delivery
came back, and leave the `StepRun` that makes an attempt count.

A delivery that came back writes its `StepRun` by compare-and-set from the revision it
read, before its tool runs: of two deliveries of one step that came back at once (a
failover gave the message out again while NATS was away), only one runs it, and neither
runs it once its checkpoint is stored. A suspect that must run alone (`runs.Count.alone`)
first writes that it waits, then waits for its process to be free, and only then marks its
run `running` and `alone`: in that order, a worker that dies while it waits costs it
nothing, and one that dies while it runs alone is its own death."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tether.clock import utcnow
from tether.errors import RevisionConflictError
from tether.nats.delivery import Delivery
from tether.nats.feeds import last_event
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas.runs import StepRun
from tether.schemas.work import WorkMessage
from tether.worker import decisions, runs
from tether.worker.heartbeats import StepHeartbeat

CLAIM_TRIES = 3


class Mark(Protocol):
    def __call__(self, running: bool, last: int | None = None) -> Awaitable[int]: ...


class NotHere(Enum):
    """Why a delivery that came back does not run its step after all."""

    DONE_MEANWHILE = "done"
    """Its checkpoint is stored, or its task moved on, since the delivery's first read."""
    RUNS_ELSEWHERE = "elsewhere"
    """Another delivery of the step started it since: it is that one's."""


@dataclass(frozen=True)
class Look:
    counted: runs.Count
    revision: int | None
    """The `StepRun`'s revision as read (0: none); None for a first delivery (not read)."""
    holder: str
    """The worker this runs in (`StepRun.holder`)."""
    elsewhere: bool = False


async def count(store: Store, delivery: Delivery, work: WorkMessage, holder: str) -> Look:
    """Which attempt this delivery runs (set on it): its step's last run is read only for
    a delivery that came back, so a first delivery costs nothing."""
    prior, delivered, sequence = delivery.prior, delivery.delivered, delivery.stream_sequence
    if not delivery.came_back:
        counted = runs.count(prior, delivered, sequence, work.generation, None)
        return Look(counted, None, holder)
    last, revision = await store.heartbeats.run_of(work.task_id, work.step, work.branch)
    if last is None or last.generation != work.generation:
        last = runs.started_by_event(await last_event(store, work.task_id), work, prior)
    # A held delivery's message is acknowledged: no later delivery of it runs. But one held
    # at once (an agent's) may be a copy a busy worker is late with: it goes back to wait.
    later = not delivery.held and runs.runs_elsewhere(last, sequence, delivered)
    elsewhere = later or await _held_alive(store, last, holder)
    counted = runs.count(prior, delivered, sequence, work.generation, last)
    delivery.count(counted.attempt)
    return Look(counted, revision, holder, elsewhere)


async def started(
    store: Store,
    delivery: Delivery,
    heartbeat: StepHeartbeat,
    work: WorkMessage,
    look: Look,
    at_once: bool = False,
) -> Mark | NotHere:
    """Make the attempt count: its `StepRun` now (compare-and-set), on a delivery that
    came back; with the first beat on a first delivery (one that ends sooner counts by its
    `step_started`). Returns the mark, for a failure to say the step goes back, or why
    the step does not run here after all. A step whose first beat comes `at_once` (an
    agent's: its call costs money) is marked by compare-and-set before it runs, at no
    cost: two copies of a message a busy worker took late never both call the model."""
    mark = marker(store, delivery, work, look)
    if look.revision is None and not at_once:
        heartbeat.mark = lambda: mark(True)
        return mark
    if look.revision is None:
        claimed = await _claimed(store, delivery, work, mark, look)
        return NotHere.RUNS_ELSEWHERE if claimed is None else mark
    # Checked before the mark too: a delivery that cannot reach NATS leaves no mark
    # (the next delivery would take it for a run whose worker died).
    if await _done(store, work):
        return NotHere.DONE_MEANWHILE
    if await _claimed(store, delivery, work, mark, look) is None:
        return NotHere.RUNS_ELSEWHERE
    return NotHere.DONE_MEANWHILE if await _done(store, work) else mark


async def waiting(
    store: Store, delivery: Delivery, work: WorkMessage, look: Look
) -> Look | NotHere:
    """Say that a suspect's attempt is counted and waits to run alone (so that a death of
    its worker meanwhile costs it nothing); the look to start it from once it may, or why
    it does not run here after all."""
    assert look.revision is not None  # a suspect's delivery came back: it read its run
    wait = marker(store, delivery, work, look, waiting=True)
    revision = await _claimed(store, delivery, work, wait, look)
    if revision is None:
        return NotHere.RUNS_ELSEWHERE
    return Look(look.counted, revision, look.holder)


async def _done(store: Store, work: WorkMessage) -> bool:
    """Whether the step, read again, is no longer to run (`decisions.decide`): its
    checkpoint is stored, or its task moved on or ended."""
    found, checkpoint = await asyncio.gather(
        store.records.get(work.task_id),
        store.checkpoints.get(work.task_id, work.step, work.branch),
    )
    record = found.record if found is not None else None
    return not isinstance(decisions.decide(record, checkpoint, work), decisions.Execute)


async def _claimed(
    store: Store, delivery: Delivery, work: WorkMessage, mark: Mark, look: Look
) -> int | None:
    """Write the mark by compare-and-set; its revision, or None when another delivery
    started the step: a later one of the message, or one in a worker that is alive (two
    copies of a message a busy worker took late). A conflict alone is not proof of that:
    during a failover a mark of this delivery's may have been stored though its write
    timed out, or a read may have been behind, so read again and try again."""
    revision = look.revision or 0
    for _ in range(CLAIM_TRIES):
        try:
            return await mark(True, revision)
        except RevisionConflictError:
            last, revision = await store.heartbeats.run_of(work.task_id, work.step, work.branch)
            later = not delivery.held and runs.runs_elsewhere(
                last, delivery.stream_sequence, delivery.delivered
            )
            if later or await _held_alive(store, last, look.holder):
                return None
    return revision if delivery.held else None


async def _held_alive(store: Store, last: StepRun | None, holder: str) -> bool:
    """Whether another worker that is alive runs the step (`runs.held_by`): this
    delivery came back only because that worker was late, not dead."""
    other = runs.held_by(last, holder, utcnow())
    if other is None:
        return False
    return await store.workers.alive(other, store.names.alive_subject(worker_key(other)))


def marker(
    store: Store, delivery: Delivery, work: WorkMessage, look: Look, waiting: bool = False
) -> Mark:
    """Writes the step's `StepRun`: `running` (the attempt started; `alone` for a
    suspect), or not (it failed and goes back, so the next delivery is the next attempt,
    not a death); with `waiting`, that it is counted and waits to run alone."""

    counted = look.counted

    async def mark(running: bool, last: int | None = None) -> int:
        run = StepRun(
            generation=work.generation,
            attempt=counted.attempt,
            sequence=delivery.stream_sequence,
            delivered=delivery.delivered,
            running=running and not waiting,
            deaths=counted.deaths,
            spared=counted.spared,
            alone=running and counted.alone and not waiting,
            waiting=waiting,
            time=utcnow(),
            holder=look.holder,
        )
        return await store.heartbeats.put_run(work.task_id, work.step, work.branch, run, last)

    return mark
