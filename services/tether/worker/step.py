"""One work message, start to finish: the step protocol of schemas/README.md.

decode → read the record and checkpoint → `decide` → act: drop, replay the hand-off,
complete from the checkpoint, leave a waiting task, or execute (with heartbeats), then
record and hand off → ack. The choices are pure (`decisions`); this module does the I/O,
and settles every message through its `Delivery` (done, retry, give up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta

import msgspec

from tether.deploys.fleet import FleetView
from tether.deploys.routing import Refuse
from tether.errors import (
    NatsUnavailableError,
)
from tether.nats import headers
from tether.nats.delivery import Delivery
from tether.nats.recent import Versioned
from tether.nats.store import Store
from tether.schemas.codec import NESTED, work_decoder
from tether.schemas.ids import InvalidNameError, validate_task_id
from tether.schemas.names import build_token
from tether.schemas.records import Checkpoint, ErrorInfo
from tether.schemas.work import WorkMessage
from tether.tasks import rules
from tether.tasks.service import TaskService
from tether.tools.tool import Tool
from tether.worker import decisions
from tether.worker.attempts import AttemptObserver
from tether.worker.custody import Custody
from tether.worker.execution import Execution
from tether.worker.heartbeats import StepHeartbeat
from tether.worker.lag import LoopLag
from tether.worker.run_marks import NotHere

log = logging.getLogger("tether.worker")
AFTER_AN_ERROR = timedelta(seconds=1)
"""How soon a step whose handling failed (NATS away) is tried again."""
TRY_IN_PLACE_FOR = timedelta(seconds=30)
"""How long a step is tried again in this process while NATS is away, before it is left
to a redelivery (or, held, published again)."""
LATE_START = 0.25
"""Seconds a fetched message may wait for its step to start (a busy event loop) before it
is handled as one that may also have gone to another worker (see `Delivery.came_back`)."""


@dataclass
class StepRunner:
    store: Store
    tools: dict[str, Tool]
    worker_id: str
    rng: random.Random
    custody: Custody | None = None
    """Where steps that run long are held; None: every step keeps its message."""
    observer: AttemptObserver | None = None
    """Told of each attempt's start and end (metrics)."""
    build: str | None = None
    fleet: FleetView | None = None
    """The builds this process knows of: a step that should run on another is sent on."""
    lag: LoopLag | None = None
    """How late this process's event loop runs (see `_if_late`)."""
    _running: dict[str, set[StepHeartbeat]] = field(default_factory=dict)
    _copies: dict[tuple[str, int, int | None, int], tuple[asyncio.Lock, int]] = field(
        default_factory=dict
    )
    """The step messages being handled here, by step, with how many copies are in hand."""

    def __post_init__(self) -> None:
        self.tasks = TaskService(self.store, router=self.fleet)
        self.execution = Execution(
            self.store,
            self.tasks,
            self.worker_id,
            self.rng,
            self.observer,
            self.supersede,
            self.build,
        )

    def supersede(self, work: WorkMessage, winner: StepHeartbeat) -> None:
        """An attempt has its result: stop any other attempt of the same step running in
        this process (a redelivery after a server lost a consumer's state), before it
        calls a model again or streams text after the task has moved on."""
        for heartbeat in self._running.get(work.task_id, ()):
            if heartbeat is not winner and heartbeat.runs(work.step, work.branch):
                heartbeat.supersede()

    async def handle(self, delivery: Delivery, started: Callable[[], None] | None = None) -> None:
        """Process one message; never raises, so one bad step cannot stop a worker.
        `started` is called when its tool starts to run."""
        tool = self.tools.get(self._tool_of(delivery))
        interval = tool.heartbeat if tool else timedelta(seconds=1)
        # A held step leaves the consumer's ack-pending count: not for a limited tool.
        custody = self.custody if tool is not None and tool.max_concurrency is None else None
        try:
            at_once = tool is not None and tool.agent
            beat = StepHeartbeat(delivery, self.store, interval, custody, started, at_once)
            async with beat as heartbeat:
                await self._handle_while_nats_is_away(delivery, heartbeat)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Left unacknowledged, JetStream redelivers it and the protocol replays; a held
            # step's message is acknowledged already, so it is published again instead.
            log.exception("step message on %s failed; it will be redelivered", delivery.subject)
            if delivery.held:
                with contextlib.suppress(Exception):
                    await delivery.retry(AFTER_AN_ERROR)

    async def _handle_while_nats_is_away(
        self, delivery: Delivery, heartbeat: StepHeartbeat
    ) -> None:
        """Handle the message, again after a failure to reach NATS (a failover, a
        restart), for up to `TRY_IN_PLACE_FOR`: every step of the protocol is safe to
        replay, and a redelivery would count as an attempt that never ran."""
        deadline = asyncio.get_running_loop().time() + TRY_IN_PLACE_FOR.total_seconds()
        while True:
            try:
                await self._handle(delivery, heartbeat)
                return
            except NatsUnavailableError as exc:
                if delivery.settled or asyncio.get_running_loop().time() > deadline:
                    raise
                log.warning("%s: NATS is away (%s); trying it again", delivery.subject, exc)
                delivery.handle_again()
                await asyncio.sleep(AFTER_AN_ERROR.total_seconds())

    def stop_task(self, task_id: str) -> None:
        """A cancellation notice: end the task's running steps now."""
        for heartbeat in self._running.get(task_id, ()):
            heartbeat.end()

    def held(self) -> list[StepHeartbeat]:
        """The running steps in this worker's custody."""
        return [beat for beats in self._running.values() for beat in beats if beat.held]

    async def stop_ended(self, at_once: int = 64) -> int:
        """Read the record of every task with a running step, `at_once` at a time, and
        stop those that ended: the fallback for a cancellation notice this process
        missed (it was disconnected). Returns how many it stopped."""
        stopped = 0
        task_ids = list(self._running)
        for start in range(0, len(task_ids), at_once):
            batch = task_ids[start : start + at_once]
            found = await asyncio.gather(*(self.store.records.get(t) for t in batch))
            for task_id, record in zip(batch, found, strict=True):
                if record is None or record.record.status.is_terminal:
                    self.stop_task(task_id)
                    stopped += 1
        return stopped

    async def _handle(self, delivery: Delivery, heartbeat: StepHeartbeat) -> None:
        work = await self._decode(delivery)
        if work is None:
            return
        running = self._running.setdefault(work.task_id, set())
        running.add(heartbeat)
        try:
            async with self._one_copy_at_a_time(work):
                await self._handle_work(delivery, heartbeat, work)
        finally:
            running.discard(heartbeat)
            if not running:
                self._running.pop(work.task_id, None)

    @contextlib.asynccontextmanager
    async def _one_copy_at_a_time(self, work: WorkMessage) -> AsyncIterator[None]:
        """Handle a second copy of a step's message (a failover redelivered it, or two
        survivors handed the step on) only once the first is done here: it then finds the
        first one's checkpoint, where running beside it, it ran a finished step again."""
        key = (work.task_id, work.step, work.branch, work.generation)
        lock, copies = self._copies.get(key) or (asyncio.Lock(), 0)
        self._copies[key] = (lock, copies + 1)
        try:
            async with lock:
                yield
        finally:
            lock, copies = self._copies[key]
            if copies == 1:
                del self._copies[key]
            else:
                self._copies[key] = (lock, copies - 1)

    async def _handle_work(
        self, delivery: Delivery, heartbeat: StepHeartbeat, work: WorkMessage, again: bool = True
    ) -> None:
        await _if_late(delivery, self.lag)
        found, checkpoint = await self._read(work, first=not delivery.came_back)
        record = found.record if found else None
        decision = decisions.decide(record, checkpoint, work, delivery.attempt)
        match decision:
            case decisions.Reject(reason):
                await self._reject(delivery, reason, work)
            case decisions.Execute():
                assert found is not None
                if await self._elsewhere(delivery, work, found):
                    return
                await self._execute(delivery, heartbeat, work, found, again)
            case decisions.RepublishHandoff(stored):
                assert found is not None
                await self.tasks.replay_hand_off(found.record, work.step, stored)
                await delivery.done()
            case decisions.ReplayFanIn(mine):
                assert found is not None
                assert work.branch is not None  # only a branch's message is decided so
                await self.tasks.branches.replay_fan_in(found.record, work.step, work.branch, mine)
                await delivery.done()
            case decisions.SayBranchDone(stored):
                assert found is not None and work.branch is not None
                await self.tasks.branches.say_completed(
                    found.record, work.step, work.branch, stored, stored.attempt, skipped=True
                )
                await delivery.done()
            case decisions.FromCheckpoint(stored) if work.branch is not None:
                assert found is not None
                await self.tasks.branches.count(found, work.step, work.branch, stored, skipped=True)
                await delivery.done()
            case decisions.FromCheckpoint(stored):
                assert found is not None
                await self.tasks.complete_step(found, work.step, stored, skipped=True)
                await delivery.done()
            case decisions.ReplayFailure():
                assert found is not None
                await self.tasks.endings.say_failed(found.record)
                await delivery.done()
            case decisions.Drop() if found is not None and found.record.parent is not None:
                await self.tasks.children.resume_parent(found.record)  # again: harmless
                await delivery.done()
            case decisions.Drop() | decisions.Wait():
                await delivery.done()

    async def _execute(
        self,
        delivery: Delivery,
        heartbeat: StepHeartbeat,
        work: WorkMessage,
        found: Versioned,
        again: bool,
    ) -> None:
        tool = self.tools[work.tool]
        not_here = await self.execution.run(delivery, heartbeat, tool, work, found)
        if not_here is NotHere.DONE_MEANWHILE and again:  # by another holder: decide anew
            await self._handle_work(delivery, heartbeat, work, again=False)
        elif not_here is NotHere.RUNS_ELSEWHERE and not delivery.held:
            pass  # left to the later delivery of its message, which settles it
        elif not_here is not None:  # back soon, to be decided again
            await delivery.retry(AFTER_AN_ERROR)

    async def _read(
        self, work: WorkMessage, first: bool
    ) -> tuple[Versioned | None, Checkpoint | None]:
        """The task record and the step's checkpoint, read at once.

        The delivery count is no proof that a step never ran: a nats-server that was
        killed can lose a consumer's delivery state, and redeliver a step whose
        checkpoint is stored as a first delivery. Only a record this process wrote
        itself, for the step it just handed off (see `RecentRecords`, which drops
        every entry on a reconnect), lets a first delivery skip both reads.
        """
        recent = self.store.records.recent
        if first and recent is not None:
            found = recent.take(work.task_id, work.step, work.generation)
            if found is not None:
                return found, None
        return await asyncio.gather(
            self.store.records.get(work.task_id),
            self.store.checkpoints.get(work.task_id, work.step, work.branch),
        )

    async def _decode(self, delivery: Delivery) -> WorkMessage | None:
        try:
            work = work_decoder.decode(delivery.data)
            validate_task_id(work.task_id)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidNameError) as exc:
            await self._reject(delivery, f"undecodable work message: {exc}", None)
            return None
        except RecursionError:
            await self._reject(delivery, "undecodable work message: " + NESTED, None)
            return None
        if work.tool != self._tool_of(delivery) or work.tool not in self.tools:
            reason = f"message for tool {work.tool!r} on {delivery.subject}"
            await self._reject(delivery, reason, work)
            return None
        return work

    async def _reject(self, delivery: Delivery, reason: str, work: WorkMessage | None) -> None:
        error = ErrorInfo(type="InvalidMessage", message=reason)
        await self.tasks.dead_letters.keep(
            tool=self._tool_of(delivery),
            subject=delivery.subject,
            data=delivery.data,
            error=error,
            task_id=work.task_id if work else None,
            step=work.step if work else None,
            branch=work.branch if work else None,
            attempt=delivery.attempt,
        )
        if work is not None:
            found = await self.store.records.get(work.task_id)
            # the step the task waits on cannot run: say so (a stray message about another
            # step or run of the task is only dead-lettered)
            if found is not None and rules.runs_step(found.record, work.step, work.generation):
                await self.tasks.endings.fail(
                    work.task_id, error, step=work.step, branch=work.branch
                )
        await delivery.give_up()

    def _tool_of(self, delivery: Delivery) -> str:
        return self.store.names.tool_of(delivery.subject)

    async def _elsewhere(self, delivery: Delivery, work: WorkMessage, found: Versioned) -> bool:
        """Send a step that came to any worker of its tool on to the build that should run
        it, or fail its task when it may run nowhere (`routing`); False: it runs here."""
        if self.fleet is None or delivery.subject != self.store.names.work_subject(work.tool):
            return False  # routed here on purpose (or no builds told apart)
        placed = self.fleet.placement(work, found.record)
        if placed is None or placed == self.build:
            return False
        await self._send_on(delivery, work, placed)
        return True

    async def move(self, delivery: Delivery, gone: str) -> None:
        """A step routed to build `gone`, of which no worker is left: send it where it may
        run now, or put it back there (its grace is not over, or no build takes its
        input), as a new message that keeps its attempt count (a redelivery would add one)."""
        work = await self._decode(delivery)
        if work is None or self.fleet is None:
            return
        found = await self.store.records.get(work.task_id)
        if found is None or not rules.runs_step(found.record, work.step, work.generation):
            await delivery.done()  # the task moved on, or ended: nothing to run
            return
        await self._send_on(delivery, work, self.fleet.placement(work, found.record))

    async def _send_on(
        self, delivery: Delivery, work: WorkMessage, placed: str | Refuse | None
    ) -> None:
        if isinstance(placed, Refuse):
            error = ErrorInfo(type="BuildGone", message=placed.reason)
            await self.tasks.endings.fail(work.task_id, error, step=work.step, branch=work.branch)
        else:
            # One id per message sent on (a redelivery of this one sends the same id):
            # the step's own id, where it goes, and the sequence of the message it was.
            step_id = delivery.msg_id.split("@", 1)[0]
            token = "any" if placed is None else build_token(placed)
            sent = {
                headers.MSG_ID: f"{step_id}@{token}.s{delivery.stream_sequence}",
                headers.PRIOR_ATTEMPTS: str(delivery.attempt - 1),
            }
            subject = self.store.names.work_subject(work.tool, placed)
            await self.store.publish_raw(subject, delivery.data, sent)
        await delivery.done()


async def _if_late(delivery: Delivery, lag: LoopLag | None) -> None:
    """A busy process: before its first beat the ack wait may run out, and the message go
    to another worker. Restart the clock and count it as one that came back, whose run is
    marked (compare-and-set) before it starts. Late is `LATE_START` since it was fetched,
    or a loop late by as much since the fetch was asked for: the message may have waited
    that long, and more, before the fetch returned it."""
    if delivery.came_back:
        return
    late = lag is not None and lag.worst_since(delivery.asked_at) > LATE_START
    if late or delivery.waited > LATE_START:
        with contextlib.suppress(Exception):
            await delivery.extend()
        delivery.handle_again()
