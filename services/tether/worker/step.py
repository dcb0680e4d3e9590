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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgspec

from tether.clock import utcnow
from tether.errors import (
    BlobNotFoundError,
    InvalidTaskError,
    MessageTooLargeError,
    NatsUnavailableError,
    TaskExistsError,
)
from tether.nats.delivery import Delivery
from tether.nats.recent import Versioned
from tether.nats.store import Store
from tether.schemas.codec import NESTED, work_decoder
from tether.schemas.events import StepRetrying, StepStarted
from tether.schemas.ids import InvalidNameError, validate_task_id
from tether.schemas.tasks import (
    Checkpoint,
    ErrorInfo,
    StepSpec,
    TaskRecord,
    TaskStatus,
    Usage,
    WorkMessage,
)
from tether.tasks import rules
from tether.tasks.service import TaskService
from tether.worker import decisions
from tether.worker.app import Tool
from tether.worker.attempts import Attempt, AttemptObserver, Outcome
from tether.worker.context import StepContext
from tether.worker.custody import Custody
from tether.worker.decisions import Failure, GiveUp, Retry
from tether.worker.heartbeats import StepHeartbeat
from tether.worker.outputs import UnstorableResult, checkpoint_of
from tether.worker.record_start import RecordStart
from tether.worker.results import Child, NeedsInput, NextSteps, Sleep
from tether.worker.retry import RetryPolicy

log = logging.getLogger("tether.worker")
AFTER_AN_ERROR = timedelta(seconds=1)
"""How soon a step whose handling failed (NATS away) is tried again."""
TRY_IN_PLACE_FOR = timedelta(seconds=30)
"""How long a step is tried again in this process while NATS is away, before it is left
to a redelivery (or, held, published again)."""


class _Failed(Exception):
    """An attempt failed; `failure` says how (see `decisions.classify`)."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure


class _TaskEnded(Exception):
    """The task was cancelled (or failed elsewhere) while the step ran."""


def _give_up(error: ErrorInfo) -> _Failed:
    return _Failed(Failure(error, retryable=False))


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
    _running: dict[str, set[StepHeartbeat]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tasks = TaskService(self.store)

    async def handle(
        self, delivery: Delivery, started: Callable[[], None] | None = None
    ) -> None:
        """Process one message; never raises, so one bad step cannot stop a worker.
        `started` is called when its tool starts to run."""
        tool = self.tools.get(_tool_of(delivery))
        interval = tool.heartbeat if tool else timedelta(seconds=1)
        # A held step leaves the consumer's ack-pending count: not for a limited tool.
        custody = self.custody if tool is not None and tool.max_concurrency is None else None
        try:
            beat = StepHeartbeat(delivery, self.store, interval, custody, started)
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
                await asyncio.sleep(AFTER_AN_ERROR.total_seconds())

    def stop_task(self, task_id: str) -> None:
        """A cancellation notice: end the task's running steps now."""
        for heartbeat in self._running.get(task_id, ()):
            heartbeat.end()

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
            await self._handle_work(delivery, heartbeat, work)
        finally:
            running.discard(heartbeat)
            if not running:
                self._running.pop(work.task_id, None)

    async def _handle_work(
        self, delivery: Delivery, heartbeat: StepHeartbeat, work: WorkMessage
    ) -> None:
        found, checkpoint = await self._read(work, delivery.attempt)
        decision = decisions.decide(found.record if found else None, checkpoint, work)
        match decision:
            case decisions.Reject(reason):
                await self._reject(delivery, reason, work)
            case decisions.Execute():
                assert found is not None
                await self._execute(delivery, heartbeat, self.tools[work.tool], work, found)
            case decisions.RepublishHandoff(stored):
                assert found is not None
                await self.tasks.replay_hand_off(found.record, work.step, stored)
                await delivery.done()
            case decisions.ReplayFanIn():
                assert found is not None
                await self.tasks.branches.replay_fan_in(found.record, work.step)
                await delivery.done()
            case decisions.FromCheckpoint(stored) if work.branch is not None:
                assert found is not None
                await self.tasks.branches.count(found, work.step, work.branch, stored, skipped=True)
                await delivery.done()
            case decisions.FromCheckpoint(stored):
                assert found is not None
                await self.tasks.complete_step(found, work.step, stored, skipped=True)
                await delivery.done()
            case decisions.Drop() if found is not None and found.record.parent is not None:
                await self.tasks.children.resume_parent(found.record)  # again: harmless
                await delivery.done()
            case decisions.Drop() | decisions.Wait():
                await delivery.done()

    async def _read(
        self, work: WorkMessage, delivery: int
    ) -> tuple[Versioned | None, Checkpoint | None]:
        """The task record and the step's checkpoint, read at once.

        The delivery count is no proof that a step never ran: a nats-server that was
        killed can lose a consumer's delivery state, and redeliver a step whose
        checkpoint is stored as a first delivery. Only a record this process wrote
        itself, for the step it just handed off (see `RecentRecords`, which drops
        every entry on a reconnect), lets a first delivery skip both reads.
        """
        recent = self.store.records.recent
        if delivery == 1 and recent is not None:
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
        if work.tool != _tool_of(delivery) or work.tool not in self.tools:
            reason = f"message for tool {work.tool!r} on {delivery.subject}"
            await self._reject(delivery, reason, work)
            return None
        return work

    async def _reject(self, delivery: Delivery, reason: str, work: WorkMessage | None) -> None:
        error = ErrorInfo(type="InvalidMessage", message=reason)
        await self.tasks.dead_letter(
            tool=_tool_of(delivery),
            subject=delivery.subject,
            data=delivery.data,
            error=error,
            task_id=work.task_id if work else None,
            step=work.step if work else None,
            branch=work.branch if work else None,
            attempt=delivery.attempt,
        )
        if work is not None and await self.store.records.get(work.task_id) is not None:
            await self.tasks.fail(work.task_id, error, step=work.step, branch=work.branch)
        await delivery.give_up()

    async def _execute(
        self,
        delivery: Delivery,
        heartbeat: StepHeartbeat,
        tool: Tool,
        work: WorkMessage,
        found: Versioned,
    ) -> None:
        spec = found.record.spec(work.step).branch(work.branch)
        policy = tool.retry.overridden(spec.retry)
        early = decisions.before_attempt(found.record, delivery.attempt, policy, utcnow())
        if early is not None:
            failure = Failure(early.error, retryable=False)
            await self._settle_failure(delivery, tool, work, found, policy, failure)
            return
        started = await self._start(found, work, delivery.attempt)
        number = delivery.attempt
        attempt = Attempt(found.record, work, number, tool.agent, self.observer)
        try:
            try:
                try:
                    result, usage = await self._run_tool(heartbeat, tool, spec, work, found, number)
                finally:
                    if started is not None:
                        found = await started.settle()
                outcome = await self._finish(found, work, number, result, usage)
            except _TaskEnded:
                outcome = Outcome.CANCELLED
            except _Failed as failed:
                failure = failed.failure
                ended = await self._settle_failure(delivery, tool, work, found, policy, failure)
                attempt.end(ended, failed.__cause__)
                return
            await delivery.done()
            attempt.end(outcome)
        finally:
            attempt.end(Outcome.HANDED_ON)  # unless it ended above: stopped, or NATS away

    async def _emit(
        self,
        kind: type[StepStarted] | type[StepRetrying],
        work: WorkMessage,
        attempt: int,
        **fields: Any,
    ) -> None:
        """A running step's event; its `Nats-Msg-Id` names the attempt, so a replay is a no-op."""
        event = kind(
            task_id=work.task_id,
            status=TaskStatus.RUNNING,
            step=work.step,
            branch=work.branch,
            tool=work.tool,
            attempt=attempt,
            time=utcnow(),
            generation=work.generation,
            **fields,
        )
        await self.store.emit(event, attempt)

    async def _start(self, found: Versioned, work: WorkMessage, attempt: int) -> RecordStart | None:
        """Emit `step_started`; on a pending task also move it to running (see
        `RecordStart`; the caller settles it before finishing)."""
        await self._emit(StepStarted, work, attempt)
        if found.record.status is not TaskStatus.PENDING:
            return None
        return RecordStart(self.store, found, work)

    async def _run_tool(
        self,
        heartbeat: StepHeartbeat,
        tool: Tool,
        spec: StepSpec,
        work: WorkMessage,
        found: Versioned,
        attempt: int,
    ) -> tuple[Any, Usage | None]:
        ctx = StepContext(
            store=self.store,
            record=found.record,
            step=work.step,
            attempt=attempt,
            worker_id=self.worker_id,
            branch=work.branch,
        )
        try:
            data = tool.convert_input(await self.store.blobs.resolve(work.input))
        except msgspec.ValidationError as exc:
            raise _give_up(ErrorInfo(type="InvalidInput", message=f"{tool.name}: {exc}")) from exc
        except BlobNotFoundError as exc:
            raise _give_up(ErrorInfo(type="BlobNotFound", message=str(exc))) from exc
        args = (ctx, data) if tool.takes_input else (ctx,)
        # Created here, so the tool runs inside the attempt's span (see `Attempt`).
        call: asyncio.Task[Any] = asyncio.ensure_future(tool.function(*args))
        return await self._call(heartbeat, ctx, call, tool, spec, found.record)

    async def _call(
        self,
        heartbeat: StepHeartbeat,
        ctx: StepContext,
        call: asyncio.Task[Any],
        tool: Tool,
        spec: StepSpec,
        record: TaskRecord,
    ) -> tuple[Any, Usage | None]:
        """Wait for the tool: its timeout, its heartbeats, and what its failure means."""
        timeout = decisions.step_timeout(tool.timeout, spec, record.deadline_at, utcnow())
        heartbeat.attach(ctx, call)
        limit = asyncio.timeout(timeout) if timeout is not None else None
        try:
            if limit is None:  # most tools: no timer to arm on the hot path
                result = await call
            else:
                async with limit:
                    result = await call
            await ctx.end_stream()
            return result, ctx.usage
        except asyncio.CancelledError:
            if heartbeat.ended:
                raise _TaskEnded from None
            raise
        except Exception as exc:
            failure = decisions.classify(
                exc,
                timed_out=limit is not None and limit.expired(),  # not the tool's own TimeoutError
                deadline_passed=rules.deadline_passed(record, utcnow()),
                timeout=timeout,
            )
            raise _Failed(failure) from exc
        finally:
            heartbeat.detach()

    async def _finish(
        self, found: Versioned, work: WorkMessage, attempt: int, result: Any, usage: Usage | None
    ) -> Outcome:
        try:
            return await self._record(found, work, attempt, result, usage)
        except MessageTooLargeError as exc:
            raise _give_up(_too_large(exc)) from exc

    async def _record(
        self, found: Versioned, work: WorkMessage, attempt: int, result: Any, usage: Usage | None
    ) -> Outcome:
        """Store what the tool returned and hand the task on; what became of the attempt."""
        if work.branch is not None:
            if isinstance(result, NeedsInput | NextSteps | Sleep | Child):
                raise _give_up(_NOT_IN_A_BRANCH)
            checkpoint = await self._by_reference(_stored(result, attempt, usage))
            await self.tasks.branches.record(
                found, work.step, work.branch, checkpoint, attempt=attempt
            )
            return Outcome.COMPLETED
        if isinstance(result, NeedsInput):
            await self.tasks.wait_for_input(found, work.step, result.request(utcnow()), attempt)
            return Outcome.WAITING
        if isinstance(result, Child):
            await self._start_child(found, work, result)
            return Outcome.CHILD
        checkpoint = await self._by_reference(_stored(result, attempt, usage))
        await self.tasks.record_step(found, work.step, checkpoint, attempt=attempt)
        return Outcome.COMPLETED

    async def _by_reference(self, checkpoint: Checkpoint) -> Checkpoint:
        """The checkpoint with a large output stored once as a blob (see `nats.blobs`)."""
        output = await self.store.blobs.raw_by_reference(checkpoint.output)
        inline = output is checkpoint.output  # most outputs: small enough to travel as is
        return checkpoint if inline else msgspec.structs.replace(checkpoint, output=output)

    async def _start_child(self, found: Versioned, work: WorkMessage, child: Child) -> None:
        try:
            await self.tasks.children.start(
                found, work.step, child.steps, task_id=child.task_id, metadata=child.metadata
            )
        except (InvalidTaskError, InvalidNameError, TaskExistsError) as exc:
            raise _give_up(ErrorInfo(type="InvalidPlan", message=str(exc))) from exc

    async def _settle_failure(
        self,
        delivery: Delivery,
        tool: Tool,
        work: WorkMessage,
        found: Versioned,
        policy: RetryPolicy,
        failure: Failure,
    ) -> Outcome:
        """Retry later (`step_retrying`, nak with the delay) or give up (dead letter,
        failed task, term), as `decisions.outcome` says; a branch of a group that
        collects errors records its error as its output instead."""
        attempt = delivery.attempt
        match decisions.outcome(failure, policy, attempt, self.rng):
            case Retry(delay):
                retry_in_ms = int(delay.total_seconds() * 1000)
                await self._emit(
                    StepRetrying, work, attempt, error=failure.error, retry_in_ms=retry_in_ms
                )
                await delivery.retry(delay)
                return Outcome.RETRIED
            case GiveUp(error) if work.branch is not None and _collects(found, work):
                checkpoint = Checkpoint(
                    output=rules.branch_error(error), attempt=attempt, time=utcnow()
                )
                await self.tasks.branches.record(
                    found, work.step, work.branch, checkpoint, attempt=attempt
                )
                await delivery.done()
                return Outcome.FAILED
            case GiveUp(error):
                await self.tasks.dead_letter(
                    tool=tool.name,
                    subject=delivery.subject,
                    data=delivery.data,
                    error=error,
                    task_id=work.task_id,
                    step=work.step,
                    branch=work.branch,
                    attempt=attempt,
                )
                await self.tasks.fail(
                    work.task_id, error, step=work.step, branch=work.branch, attempt=attempt
                )
                await delivery.give_up()
                return Outcome.FAILED


_NOT_IN_A_BRANCH = ErrorInfo(
    type="InvalidOutput",
    message="a branch of a parallel step returned NeedsInput, NextSteps, Sleep or Child: "
    "do that in the step after the group",
)


def _collects(found: Versioned, work: WorkMessage) -> bool:
    return found.record.spec(work.step).collect_errors


def _tool_of(delivery: Delivery) -> str:
    return delivery.subject.rsplit(".", 1)[-1]


def _stored(result: Any, attempt: int, usage: Usage | None = None) -> Checkpoint:
    try:
        checkpoint = checkpoint_of(result, attempt)
    except UnstorableResult as exc:
        raise _give_up(exc.error) from exc
    return checkpoint if usage is None else msgspec.structs.replace(checkpoint, usage=usage)


def _too_large(exc: MessageTooLargeError) -> ErrorInfo:
    return ErrorInfo(type="OutputTooLarge", message=f"the step's output does not fit: {exc}")
