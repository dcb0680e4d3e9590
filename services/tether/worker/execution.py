"""Executing one step: run the tool under its timeout and heartbeat, record what it
returned and hand the task on, or settle its failure (retry or give up); each attempt
ends once (`attempts.Attempt`). `step.StepRunner` decides when a message comes to this."""

from __future__ import annotations

import asyncio
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
    TaskExistsError,
)
from tether.nats.delivery import Delivery
from tether.nats.recent import Versioned
from tether.nats.store import Store
from tether.schemas.events import StepRetrying, StepStarted
from tether.schemas.ids import InvalidNameError
from tether.schemas.plans import StepSpec
from tether.schemas.records import Checkpoint, ErrorInfo, TaskRecord, TaskStatus, Usage
from tether.schemas.work import WorkMessage
from tether.tasks import branch_rules, rules
from tether.tasks.service import TaskService
from tether.tools.context import StepContext
from tether.tools.results import Child, NeedsInput, NextSteps, Sleep, woken
from tether.tools.retry import RetryPolicy
from tether.tools.tool import Tool
from tether.worker import decisions, outputs, run_marks, runs
from tether.worker.attempts import (
    Attempt,
    AttemptObserver,
    Failed,
    Outcome,
    TaskEnded,
    give_up,
    log_failure,
)
from tether.worker.decisions import Failure, GiveUp, Retry
from tether.worker.expected import is_expected
from tether.worker.heartbeats import StepHeartbeat
from tether.worker.outputs import NOT_IN_A_BRANCH, UnstorableResult, checkpoint_of, too_large
from tether.worker.quarantine import Quarantine
from tether.worker.record_start import RecordStart

log = logging.getLogger("tether.worker")
SUPERSEDED_BACK_IN = timedelta(seconds=5)
"""When the message of an attempt stopped for another's result comes back (if that one
never recorded its result, this runs the step again)."""


@dataclass
class Execution:
    store: Store
    tasks: TaskService
    worker_id: str
    rng: random.Random
    observer: AttemptObserver | None = None
    """Told of each attempt's start and end (metrics)."""
    has_result: Callable[[WorkMessage, StepHeartbeat], None] | None = None
    """Told when an attempt's tool returned, before it is recorded (see
    `StepRunner.supersede`)."""
    build: str | None = None
    """The worker's build: named on each step's checkpoint and events."""
    quarantine: Quarantine = field(default_factory=Quarantine)
    """Where a suspect step runs alone (see `runs`)."""

    async def run(
        self,
        delivery: Delivery,
        heartbeat: StepHeartbeat,
        tool: Tool,
        work: WorkMessage,
        found: Versioned,
    ) -> run_marks.NotHere | None:
        """Run the tool and settle the message, or say why not (`run_marks.started`)."""
        spec = found.record.spec(work.step).branch(work.branch)
        policy = tool.retry.overridden(spec.retry)
        look = await run_marks.count(self.store, delivery, work, self.worker_id)
        if look.elsewhere:  # a later delivery of its message runs it (see `run_marks`)
            return run_marks.NotHere.RUNS_ELSEWHERE
        counted = look.counted
        stop = decisions.before_attempt(found.record, counted, policy, utcnow())
        if stop is not None:
            failure = Failure(stop.error, retryable=False)
            await self._settle_failure(delivery, tool, work, found, policy, failure, counted)
            return None
        if not counted.alone:
            async with self.quarantine.beside():
                return await self._attempt(delivery, heartbeat, tool, work, found, policy, look)
        # A suspect: said to wait before it waits, marked running only once it runs alone.
        waited = await run_marks.waiting(self.store, delivery, work, look)
        if isinstance(waited, run_marks.NotHere):
            return waited
        async with self.quarantine.alone():
            return await self._attempt(delivery, heartbeat, tool, work, found, policy, waited)

    async def _attempt(
        self,
        delivery: Delivery,
        heartbeat: StepHeartbeat,
        tool: Tool,
        work: WorkMessage,
        found: Versioned,
        policy: RetryPolicy,
        look: run_marks.Look,
    ) -> run_marks.NotHere | None:
        spec = found.record.spec(work.step).branch(work.branch)
        mark = await run_marks.started(self.store, delivery, heartbeat, work, look, tool.agent)
        if isinstance(mark, run_marks.NotHere):
            return mark  # another delivery runs it, or ran it after our read
        started = await self._start(found, work, delivery.attempt)
        number = delivery.attempt
        attempt = Attempt(found.record, work, number, tool.agent, self.observer)
        usage: Usage | None = None
        try:
            try:
                try:
                    result, usage = await self._run_tool(heartbeat, tool, spec, work, found, number)
                finally:
                    if started is not None:
                        found = await started.settle()
                if self.has_result is not None:
                    self.has_result(work, heartbeat)
                outcome = await self._finish(found, work, number, result, usage)
            except TaskEnded as stopped:
                if heartbeat.handed_over:  # a survivor publishes it again: leave it
                    delivery.abandon()
                    return None
                if heartbeat.superseded:  # back later, to find the step done (or run it)
                    await delivery.retry(SUPERSEDED_BACK_IN)
                    return None
                await self.tasks.endings.count_spent(work.task_id, work.generation, stopped.usage)
                outcome = Outcome.CANCELLED
            except Failed as failed:
                failure, spent = failed.failure, failed.usage or usage
                expected = is_expected(failed.__cause__)
                ended = await self._settle_failure(
                    delivery,
                    tool,
                    work,
                    found,
                    policy,
                    failure,
                    look.counted,
                    mark,
                    spent,
                    expected,
                )
                attempt.end(ended, failed.__cause__)
                return None
            await delivery.done()
            attempt.end(outcome)
            return None
        finally:
            attempt.end(Outcome.HANDED_ON)  # unless it ended above: stopped, or NATS away

    async def _running_event(
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
            build=self.build,
            **fields,
        )
        await self.store.publish_event(event, attempt)

    async def _start(self, found: Versioned, work: WorkMessage, attempt: int) -> RecordStart | None:
        """Emit `step_started`; on a pending task also move it to running (see
        `RecordStart`; the caller settles it before finishing)."""
        await self._running_event(StepStarted, work, attempt, worker=self.worker_id)
        if found.record.status is not TaskStatus.PENDING:
            return None
        return RecordStart(self.store, found, work, self.build)

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
            raise give_up(ErrorInfo(type="InvalidInput", message=f"{tool.name}: {exc}")) from exc
        except BlobNotFoundError as exc:
            raise give_up(ErrorInfo(type="BlobNotFound", message=str(exc))) from exc
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
            return outputs.noted(result, ctx.notes), ctx.usage
        except asyncio.CancelledError:
            if heartbeat.ended:
                raise TaskEnded(ctx.usage) from None
            raise
        except Exception as exc:
            failure = decisions.classify(
                exc,
                timed_out=limit is not None and limit.expired(),  # not the tool's own TimeoutError
                deadline_passed=rules.deadline_passed(record, utcnow()),
                timeout=timeout,
            )
            raise Failed(failure, ctx.usage) from exc
        finally:
            ctx.drop_stream()  # closed already unless the attempt failed or was stopped
            heartbeat.detach()

    async def _finish(
        self, found: Versioned, work: WorkMessage, attempt: int, result: Any, usage: Usage | None
    ) -> Outcome:
        try:
            return await self._record(found, work, attempt, result, usage)
        except MessageTooLargeError as exc:
            raise give_up(too_large(exc)) from exc
        except UnstorableResult as exc:
            raise give_up(exc.error) from exc

    async def _record(
        self, found: Versioned, work: WorkMessage, attempt: int, result: Any, usage: Usage | None
    ) -> Outcome:
        """Store what the tool returned and hand the task on; what became of the attempt."""
        if work.branch is not None:
            if isinstance(result, Child):
                await self._start_child(found, work, result)
                return Outcome.CHILD
            if isinstance(result, Sleep):  # a wait that answers itself with the output
                result = woken(result)
            if isinstance(result, NeedsInput):  # asked in a child task of the branch
                request = result.request(utcnow())
                await self.tasks.children.ask(found, work.step, work.branch, request, attempt)
                return Outcome.WAITING
            if isinstance(result, NextSteps):
                raise give_up(NOT_IN_A_BRANCH)
            checkpoint = await self._by_reference(checkpoint_of(result, attempt, usage, self.build))
            await self.tasks.branches.record(
                found, work.step, work.branch, checkpoint, attempt=attempt
            )
            return Outcome.COMPLETED
        if isinstance(result, NeedsInput):
            await self.tasks.answers.wait_for_input(
                found, work.step, result.request(utcnow()), attempt
            )
            return Outcome.WAITING
        if isinstance(result, Child):
            await self._start_child(found, work, result)
            return Outcome.CHILD
        checkpoint = await self._by_reference(checkpoint_of(result, attempt, usage, self.build))
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
                found,
                work.step,
                child.steps,
                task_id=child.task_id,
                metadata=child.metadata,
                branch=work.branch,
                build=self.build,
            )
        except (InvalidTaskError, InvalidNameError, TaskExistsError) as exc:
            raise give_up(ErrorInfo(type="InvalidPlan", message=str(exc))) from exc

    async def _settle_failure(
        self,
        delivery: Delivery,
        tool: Tool,
        work: WorkMessage,
        found: Versioned,
        policy: RetryPolicy,
        failure: Failure,
        counted: runs.Count,
        mark: run_marks.Mark | None = None,
        usage: Usage | None = None,
        expected: bool = False,
    ) -> Outcome:
        """Retry later (`step_retrying`, nak with the delay) or give up (dead letter
        unless `expected`, failed task, term), as `decisions.outcome` says of the attempts
        charged to the step (`counted`); a branch of a group that collects errors records
        its error as its output instead. What the attempt spent (`usage`) is counted on the
        task either way."""
        attempt = delivery.attempt
        decided = decisions.outcome(failure, policy, counted.charged, self.rng, work.task_id)
        log_failure(work, attempt, failure.error, decided, expected, failure.explained)
        match decided:
            case Retry(delay):
                retry_in_ms = int(delay.total_seconds() * 1000)
                await self.tasks.endings.count_spent(work.task_id, work.generation, usage)
                await self._running_event(
                    StepRetrying, work, attempt, error=failure.error, retry_in_ms=retry_in_ms
                )
                if mark is not None:  # the next delivery is the next attempt, not a death
                    await mark(False)
                await delivery.retry(delay)
                return Outcome.RETRIED
            case GiveUp(error) if (
                work.branch is not None
                and found.record.spec(work.step).collect_errors
                and not failure.stops_task
            ):
                output = branch_rules.branch_error(error)
                checkpoint = Checkpoint(output=output, attempt=attempt, time=utcnow(), usage=usage)
                await self.tasks.branches.record(
                    found, work.step, work.branch, checkpoint, attempt=attempt
                )
                await delivery.done()
                return Outcome.FAILED
            case GiveUp(error):
                if not expected:
                    await self.tasks.dead_letters.keep(
                        tool=tool.name,
                        subject=delivery.subject,
                        data=delivery.data,
                        error=error,
                        task_id=work.task_id,
                        step=work.step,
                        branch=work.branch,
                        attempt=attempt,
                    )
                await self.tasks.endings.fail(
                    work.task_id,
                    error,
                    step=work.step,
                    branch=work.branch,
                    attempt=attempt,
                    usage=usage,
                )
                await delivery.give_up()
                return Outcome.FAILED
