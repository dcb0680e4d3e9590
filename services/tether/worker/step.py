"""One work message, start to finish: the step protocol of DESIGN.md.

decode → check the record → checkpoint or execute (with heartbeats) → record and
hand off → ack. Outcomes map to JetStream verbs only in this module: done or stale →
ack, retry → nak(delay), give up → dead letter + term (heartbeats: in_progress).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgspec
from nats.aio.msg import Msg

from tether.engine import handoff, lifecycle, transitions
from tether.engine.plans import validate_steps
from tether.engine.transitions import utcnow
from tether.errors import (
    InvalidTaskError,
    MessageTooLargeError,
    RetryableError,
    TerminalError,
)
from tether.nats.store import Store, Versioned
from tether.schemas.codec import NESTED, encode, work_decoder
from tether.schemas.events import StepRetrying, StepStarted
from tether.schemas.ids import InvalidNameError, validate_task_id
from tether.schemas.tasks import (
    Checkpoint,
    ErrorInfo,
    StepSpec,
    TaskRecord,
    TaskStatus,
    WorkMessage,
)
from tether.worker.app import Tool
from tether.worker.context import StepContext
from tether.worker.heartbeats import StepHeartbeat
from tether.worker.results import NeedsInput, NextSteps
from tether.worker.retry import RetryPolicy

log = logging.getLogger("tether.worker")
START_DELAY = 0.1
ERROR_MESSAGE_LIMIT = 4096


class _Retry(Exception):
    def __init__(self, error: ErrorInfo, delay: timedelta | None) -> None:
        self.error = error
        self.delay = delay


class _GiveUp(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        self.error = error


class _TaskEnded(Exception):
    """The task was cancelled (or failed elsewhere) while the step ran."""


@dataclass
class StepRunner:
    store: Store
    tools: dict[str, Tool]
    worker_id: str
    rng: random.Random
    _running: dict[str, set[StepHeartbeat]] = field(default_factory=dict)

    async def handle(self, msg: Msg) -> None:
        """Process one message; never raises, so one bad step cannot stop a worker."""
        tool = self.tools.get(msg.subject.rsplit(".", 1)[-1])
        interval = tool.heartbeat if tool else timedelta(seconds=1)
        try:
            async with StepHeartbeat(msg, self.store, interval) as heartbeat:
                await self._handle(msg, heartbeat)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Left unacknowledged: JetStream redelivers it and the protocol replays.
            log.exception("step message on %s failed; it will be redelivered", msg.subject)

    def stop_task(self, task_id: str) -> None:
        """A cancellation notice: end the task's running steps now."""
        for heartbeat in self._running.get(task_id, ()):
            heartbeat.end()

    async def _handle(self, msg: Msg, heartbeat: StepHeartbeat) -> None:
        tool_name = msg.subject.rsplit(".", 1)[-1]
        work = await self._decode(msg, tool_name)
        if work is None:
            return
        running = self._running.setdefault(work.task_id, set())
        running.add(heartbeat)
        try:
            await self._handle_work(msg, heartbeat, tool_name, work)
        finally:
            running.discard(heartbeat)
            if not running:
                self._running.pop(work.task_id, None)

    async def _handle_work(
        self, msg: Msg, heartbeat: StepHeartbeat, tool_name: str, work: WorkMessage
    ) -> None:
        found, checkpoint = await self._read(work, msg.metadata.num_delivered)
        if found is None:
            await self._reject(msg, tool_name, f"no task {work.task_id!r} exists", work)
            return
        record = found.record
        if transitions.is_stale(record, work.step, work.generation):
            await msg.ack()
            return
        if record.current_step == work.step + 1:
            if checkpoint is None:
                checkpoint = await self._stored_output(record, work.step)
            if checkpoint is not None:
                await self._replay_hand_off(found, work.step, checkpoint)
                await msg.ack()
                return
            # The record moved on but the step's output never landed: run it again.
        if checkpoint is not None:
            await handoff.complete_step(self.store, found, work.step, checkpoint, skipped=True)
            await msg.ack()
            return
        if record.status is TaskStatus.WAITING:
            await msg.ack()  # the step asked for input; the answer resumes it
            return
        await self._execute(msg, heartbeat, self.tools[tool_name], work, found)

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
        recent = self.store.recent
        if delivery == 1 and recent is not None:
            found = recent.take(work.task_id, work.step, work.generation)
            if found is not None:
                return found, None
        return await asyncio.gather(
            self.store.get_record(work.task_id),
            self.store.get_checkpoint(work.task_id, work.step),
        )

    async def _decode(self, msg: Msg, tool_name: str) -> WorkMessage | None:
        try:
            work = work_decoder.decode(msg.data)
            validate_task_id(work.task_id)
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidNameError) as exc:
            await self._reject(msg, tool_name, f"undecodable work message: {exc}", None)
            return None
        except RecursionError:
            await self._reject(msg, tool_name, "undecodable work message: " + NESTED, None)
            return None
        if work.tool != tool_name or tool_name not in self.tools:
            await self._reject(
                msg, tool_name, f"message for tool {work.tool!r} on {msg.subject}", work
            )
            return None
        return work

    async def _reject(self, msg: Msg, tool: str, reason: str, work: WorkMessage | None) -> None:
        error = ErrorInfo(type="InvalidMessage", message=reason)
        await lifecycle.dead_letter(
            self.store,
            tool=tool,
            subject=msg.subject,
            data=msg.data,
            error=error,
            task_id=work.task_id if work else None,
            step=work.step if work else None,
            attempt=msg.metadata.num_delivered,
        )
        if work is not None and await self.store.get_record(work.task_id) is not None:
            await lifecycle.fail_task(self.store, work.task_id, error, step=work.step)
        await msg.term()

    async def _stored_output(self, record: TaskRecord, step: int) -> Checkpoint | None:
        """The step's checkpoint; for a completed task's last step, its result will do."""
        checkpoint = await self.store.get_checkpoint(record.task_id, step)
        if checkpoint is None and record.status is TaskStatus.COMPLETED:
            return Checkpoint(output=record.result, time=record.updated_at)
        return checkpoint

    async def _replay_hand_off(self, found: Versioned, step: int, checkpoint: Checkpoint) -> None:
        """The record moved past `step` but the holder may have died before handing off."""
        await handoff.emit_step_completed(self.store, found.record, step, checkpoint)
        await handoff.hand_off_next(self.store, found.record, step, checkpoint)

    async def _execute(
        self, msg: Msg, heartbeat: StepHeartbeat, tool: Tool, work: WorkMessage, found: Versioned
    ) -> None:
        attempt = msg.metadata.num_delivered
        spec = found.record.steps[work.step]
        policy = tool.retry.overridden(spec.retry)
        try:
            if transitions.deadline_passed(found.record, utcnow()):
                raise _GiveUp(ErrorInfo(type="DeadlineExceeded", message="task deadline exceeded"))
            if attempt > policy.max_attempts:
                raise _GiveUp(_exhausted(policy, "every attempt was lost to a crash or timeout"))
            started = await self._start(found, work, attempt)
            try:
                result = await self._run_tool(heartbeat, tool, spec, work, found, attempt)
            finally:
                if started is not None:
                    found = await started.settle()
            try:
                await self._finish(found, work, attempt, result)
            except MessageTooLargeError as exc:
                raise _GiveUp(_too_large(exc)) from exc
        except _TaskEnded:
            pass
        except _Retry as retry:
            await self._retry_or_give_up(msg, tool, work, policy, attempt, retry)
            return
        except _GiveUp as give_up:
            await self._give_up(msg, tool, work, attempt, give_up.error)
            return
        await msg.ack()

    async def _start(
        self, found: Versioned, work: WorkMessage, attempt: int
    ) -> _RecordStart | None:
        """Emit `step_started`; on a pending task also move it to running (see
        `_RecordStart`; the caller settles it before finishing)."""
        await self.store.emit(
            StepStarted(
                task_id=work.task_id,
                status=TaskStatus.RUNNING,
                step=work.step,
                tool=work.tool,
                attempt=attempt,
                time=utcnow(),
            ),
            work.generation,
            attempt,
        )
        if found.record.status is not TaskStatus.PENDING:
            return None
        return _RecordStart(self.store, found, work)

    async def _run_tool(
        self,
        heartbeat: StepHeartbeat,
        tool: Tool,
        spec: StepSpec,
        work: WorkMessage,
        found: Versioned,
        attempt: int,
    ) -> Any:
        ctx = StepContext(
            store=self.store,
            record=found.record,
            step=work.step,
            attempt=attempt,
            worker_id=self.worker_id,
        )
        try:
            data = tool.convert_input(work.input)
        except msgspec.ValidationError as exc:
            raise _GiveUp(ErrorInfo(type="InvalidInput", message=f"{tool.name}: {exc}")) from exc
        args = (ctx, data) if tool.takes_input else (ctx,)
        call: asyncio.Task[Any] = asyncio.ensure_future(tool.function(*args))
        timeout = _timeout(tool, spec, found)
        heartbeat.attach(ctx, call)
        try:
            return await asyncio.wait_for(call, timeout)
        except asyncio.CancelledError:
            if heartbeat.ended:
                raise _TaskEnded from None
            raise
        except TimeoutError as exc:
            if transitions.deadline_passed(found.record, utcnow()):
                raise _GiveUp(
                    ErrorInfo(type="DeadlineExceeded", message="task deadline exceeded")
                ) from exc
            raise _Retry(
                ErrorInfo(type="StepTimeout", message=f"step timed out after {timeout:.1f}s"), None
            ) from exc
        except TerminalError as exc:
            raise _GiveUp(_error_info(exc)) from exc
        except RetryableError as exc:
            raise _Retry(_error_info(exc), exc.retry_after) from exc
        except Exception as exc:
            raise _Retry(_error_info(exc), None) from exc
        finally:
            heartbeat.detach()

    async def _finish(self, found: Versioned, work: WorkMessage, attempt: int, result: Any) -> None:
        if isinstance(result, NeedsInput):
            await lifecycle.wait_for_input(self.store, found, work.step, result.request(), attempt)
            return
        checkpoint = _checkpoint(result, attempt)
        await handoff.record_step(self.store, found, work.step, checkpoint, attempt=attempt)

    async def _retry_or_give_up(
        self,
        msg: Msg,
        tool: Tool,
        work: WorkMessage,
        policy: RetryPolicy,
        attempt: int,
        retry: _Retry,
    ) -> None:
        if not policy.can_retry(attempt):
            await self._give_up(
                msg, tool, work, attempt, _exhausted(policy, retry.error.message, retry.error.type)
            )
            return
        delay = retry.delay if retry.delay is not None else policy.backoff(attempt, self.rng)
        await self.store.emit(
            StepRetrying(
                task_id=work.task_id,
                status=TaskStatus.RUNNING,
                step=work.step,
                tool=work.tool,
                attempt=attempt,
                time=utcnow(),
                error=retry.error,
                retry_in_ms=int(delay.total_seconds() * 1000),
            ),
            work.generation,
            attempt,
        )
        await msg.nak(delay=delay.total_seconds())

    async def _give_up(
        self, msg: Msg, tool: Tool, work: WorkMessage, attempt: int, error: ErrorInfo
    ) -> None:
        await lifecycle.dead_letter(
            self.store,
            tool=tool.name,
            subject=msg.subject,
            data=msg.data,
            error=error,
            task_id=work.task_id,
            step=work.step,
            attempt=attempt,
        )
        await lifecycle.fail_task(self.store, work.task_id, error, step=work.step, attempt=attempt)
        await msg.term()


class _RecordStart:
    """pending → running, written once the first step has run for `START_DELAY`.

    A first step that ends sooner goes straight from pending to its completion write,
    which saves one JetStream write per task; a longer one shows `running` within
    `START_DELAY` of starting (its `step_started` event goes out at once either way).
    """

    def __init__(self, store: Store, found: Versioned, work: WorkMessage) -> None:
        self._store = store
        self._found = found
        self._work = work
        self._write: asyncio.Task[Versioned] | None = None
        self._timer = asyncio.get_running_loop().call_later(START_DELAY, self._fire)

    def _fire(self) -> None:
        self._write = asyncio.create_task(self._record())

    async def _record(self) -> Versioned:
        step = self._work.step
        stored, _ = await self._store.update_record(
            self._work.task_id, lambda r: transitions.start_step(r, step, utcnow()), self._found
        )
        return stored

    async def settle(self) -> Versioned:
        """The record to finish the step from: as read, or as the start write left it."""
        self._timer.cancel()
        return self._found if self._write is None else await self._write


def _checkpoint(result: Any, attempt: int) -> Checkpoint:
    """The step's checkpoint, its output encoded once: the checkpoint, the record, the
    next step's message and the event all embed those bytes (`msgspec.Raw`)."""
    output, next_steps = result, None
    if isinstance(result, NextSteps):
        try:
            validate_steps(result.steps, "next steps")
        except InvalidTaskError as exc:
            raise _GiveUp(ErrorInfo(type="InvalidPlan", message=str(exc))) from exc
        output, next_steps = result.output, list(result.steps)
    try:
        raw = msgspec.Raw(encode(output))
    except (TypeError, msgspec.EncodeError) as exc:
        raise _GiveUp(
            ErrorInfo(
                type="InvalidOutput", message=f"the step's output cannot be stored as JSON: {exc}"
            )
        ) from exc
    return Checkpoint(output=raw, next_steps=next_steps, attempt=attempt, time=utcnow())


def _timeout(tool: Tool, spec: StepSpec, found: Versioned) -> float | None:
    limits = []
    if spec.timeout_ms is not None:
        limits.append(spec.timeout_ms / 1000)
    elif tool.timeout is not None:
        limits.append(tool.timeout.total_seconds())
    if found.record.deadline_at is not None:
        limits.append(max(0.0, (found.record.deadline_at - utcnow()).total_seconds()))
    return min(limits) if limits else None


def _too_large(exc: MessageTooLargeError) -> ErrorInfo:
    return ErrorInfo(
        type="OutputTooLarge",
        message=f"the step's output does not fit: {exc}",
    )


def _error_info(exc: BaseException) -> ErrorInfo:
    """The error as stored and sent; a huge message is cut so the failure itself fits."""
    message = str(exc) or type(exc).__name__
    if len(message) > ERROR_MESSAGE_LIMIT:
        message = message[:ERROR_MESSAGE_LIMIT] + f"… ({len(message):,} characters)"
    return ErrorInfo(type=type(exc).__name__, message=message)


def _exhausted(policy: RetryPolicy, last: str, kind: str = "RetriesExhausted") -> ErrorInfo:
    return ErrorInfo(type=kind, message=f"gave up after {policy.max_attempts} attempts: {last}")
