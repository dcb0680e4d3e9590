"""The dispatcher: turns submissions on `tether.submit.<task_id>` into task records and first steps,
stores the timers other roles ask for, wakes sleeping steps and fails tasks whose timers
fired (a deadline, an input wait that expired)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import msgspec

from tether import tracing
from tether.clock import utcnow
from tether.errors import InvalidTaskError, MessageTooLargeError, TaskExistsError
from tether.nats.connection import Connection, NatsConfig, close, connect
from tether.nats.delivery import Consumer, Delivery
from tether.nats.headers import MSG_ID, WAKE
from tether.nats.layout import Layout
from tether.nats.schedules import read_request
from tether.nats.store import Store
from tether.schemas.codec import NESTED, submit_decoder
from tether.schemas.failures import FailureType
from tether.schemas.names import SUBMIT_DEAD_LETTER, Names
from tether.schemas.plans import TaskSubmit
from tether.schemas.records import ErrorInfo, TaskRecord, TaskStatus
from tether.schemas.work import Timer
from tether.service import Service
from tether.sessions.runner import SessionRunner
from tether.tasks import rules
from tether.tasks.known_tools import KnownTools, waiting_note
from tether.tasks.plans import task_id_of, validate_submit
from tether.tasks.service import TaskService

if TYPE_CHECKING:
    from tether.metrics import Metrics

log = logging.getLogger("tether.dispatcher")
_timer_decoder = msgspec.json.Decoder(Timer)

FETCH_TIMEOUT = 1.0
SESSIONS_LOOK_EVERY = 10.0
"""Seconds between the dispatcher's looks at the sessions with a run under way: a run's
end notice is a hint, lost while no dispatcher listens, so a session whose run ended
then moves on within this."""
WAKE_AGAIN = timedelta(seconds=1)
"""When a session's message whose handling was cut off comes back."""
INDEX_REPAIR_EVERY = 60.0
"""Seconds between the dispatcher's checks of the status index against the records; a
row move lost with its process is repaired within this (plus the time it checks)."""


class Dispatcher(Service):
    """Consumes submissions: validate, create the record create-only, hand off step 0, ack."""

    def __init__(
        self,
        nats: NatsConfig | None = None,
        *,
        layout: Layout | None = None,
        batch: int = 64,
        metrics: Metrics | None = None,
        index_repair_every: float = INDEX_REPAIR_EVERY,
        sessions_look_every: float = SESSIONS_LOOK_EVERY,
    ) -> None:
        self.nats = nats or NatsConfig()
        self.metrics = metrics
        self.layout = layout or Layout.for_config(self.nats)
        self.batch = batch
        self.index_repair_every = index_repair_every
        self.sessions_look_every = sessions_look_every
        self._nc: Connection | None = None
        self._store: Store | None = None
        self._stopping = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._known_tools: KnownTools | None = None
        self._tasks: TaskService  # set by start(), with the store

    async def start(self) -> None:
        self._nc = await connect(self.nats, self.connection_lost)
        self._store = await Store.open(self._nc, self.layout)
        if self.metrics is not None:
            self.metrics.attach(self._store)
        self._known_tools = KnownTools(self._store)
        self._tasks = TaskService(self._store)
        store = self._store
        submissions, timers = await store.submit_consumer(), await store.timers_consumer()
        requests = await store.schedules_consumer()
        sessions = SessionRunner(store, self._tasks)
        inboxes = await store.sessions.consumer()
        await store.sessions.on_ended(sessions.run_ended)
        self._loops = [
            asyncio.create_task(self._serve(submissions, lambda d: self._accept(store, d))),
            asyncio.create_task(self._serve(requests, lambda d: self._schedule(store, d))),
            asyncio.create_task(self._serve(timers, lambda d: self._fire(store, d))),
            asyncio.create_task(self._serve(inboxes, lambda d: self._wake(sessions, d))),
            asyncio.create_task(self._now_and_then(sessions.look, self.sessions_look_every)),
            asyncio.create_task(self._repair_index(store)),
        ]
        log.info("dispatcher consuming %s", self.layout.names.submit_subjects)

    async def stop(self) -> None:
        self._stopping.set()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.finish_writes()
        if self._nc is not None:
            await close(self._nc)
            self._nc = None

    async def _serve(
        self, consumer: Consumer, handle: Callable[[Delivery], Awaitable[None]]
    ) -> None:
        async def settle(delivery: Delivery) -> None:
            try:
                await handle(delivery)
            except Exception:
                log.exception("message on %s failed; it will be redelivered", delivery.subject)

        while not (self._stopping.is_set() or self.is_lost):
            try:
                deliveries = await consumer.fetch(self.batch, FETCH_TIMEOUT, self._stopping)
            except Exception as exc:
                log.warning("fetch failed: %s", exc)
                await asyncio.sleep(FETCH_TIMEOUT / 4)
                continue
            await asyncio.gather(*(settle(delivery) for delivery in deliveries))

    async def _wake(self, sessions: SessionRunner, delivery: Delivery) -> None:
        """A message came to a session: bring the session up to date, then ack. Cut off
        (NATS away), it comes back in a second, not after the ack wait: a run under way
        may end meanwhile, and what was meant to steer it would go to the next."""
        assert self._store is not None
        try:
            await sessions.wake(self._store.names.session_of(delivery.subject)[0])
        except Exception:
            with contextlib.suppress(Exception):
                await delivery.retry(WAKE_AGAIN)
            raise
        await delivery.done()

    async def _now_and_then(self, look: Callable[[], Awaitable[None]], every: float) -> None:
        """`look` at start (what happened while no dispatcher ran), then every `every` s."""
        while not (self._stopping.is_set() or self.is_lost):
            try:
                await look()
            except Exception as exc:
                log.debug("a periodic look failed (tried again later): %s", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), every)
                return

    async def _repair_index(self, store: Store) -> None:
        """Repair, now and then, the rows a killed process left: a record write's row
        move runs after it, so a worker killed between the two leaves the old row."""
        if not store.records.indexing:
            return
        while not (self._stopping.is_set() or self.is_lost):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.index_repair_every)
                return
            settled = int((time.time() - self.index_repair_every) * 1_000_000)
            try:
                if deleted := await store.records.repair(settled):
                    log.info("status index: %d rows left by lost moves repaired", deleted)
            except Exception as exc:
                log.debug("status index repair failed (tried again later): %s", exc)

    async def _schedule(self, store: Store, delivery: Delivery) -> None:
        """A role asked for a timer: store it as a schedule (see `tether.nats.schedules`)."""
        request = read_request(store.names, delivery.headers)
        if request is None:
            log.warning("malformed timer request dropped: %s", delivery.headers)
            await delivery.give_up()
            return
        await store.schedule(request, delivery.data)
        await delivery.done()

    async def _fire(self, store: Store, delivery: Delivery) -> None:
        """A timer fired: a sleeping step goes to its tool (its message id makes a second
        firing a no-op), else the task service decides whether it still fails the task."""
        wake = delivery.headers.get(WAKE)
        if wake is not None:
            msg_id = store.names.fired_timer_id(delivery.subject)
            await store.publish_raw(wake, delivery.data, {MSG_ID: msg_id})
            await delivery.done()
            return
        try:
            timer = _timer_decoder.decode(delivery.data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            log.warning("undecodable timer on %s dropped: %s", delivery.subject, exc)
            await delivery.give_up()
            return
        await self._tasks.answers.expire(timer)
        await delivery.done()

    async def _accept(self, store: Store, delivery: Delivery) -> None:
        named = store.names.submitted_id(delivery.subject)
        try:
            submit = _decode(delivery.data, named, store.names)
            assert self._known_tools is not None
            if submit.strict:
                await self._known_tools.check(submit.steps)
                missing = []
            else:
                missing = await self._known_tools.unknown(submit.steps)
        except InvalidTaskError as exc:
            # A record only for the task the subject names: never for another's id.
            await self._reject(store, delivery, str(exc), task_id_of(delivery.data) == named)
            return
        seq = delivery.stream_sequence
        record = rules.new_record(submit, utcnow(), seq, note=waiting_note(missing))
        context = tracing.task_context(delivery.headers, submit.task_id)
        if context is not None:
            record = msgspec.structs.replace(record, trace=context)
        try:
            created, new = await store.records.create_or_find(record)
        except MessageTooLargeError as exc:
            await self._reject(
                store, delivery, f"task {submit.task_id!r} is too large to record: {exc}"
            )
            return
        except TaskExistsError as exc:  # removed by gc within the duplicate window
            await self._reject(store, delivery, str(exc), record=False)
            return
        if not new and created.record.submit_seq != seq:
            log.warning("duplicate submit of task %r ignored: it already exists", submit.task_id)
            await delivery.done()
            return
        # (not new, same seq: our own earlier attempt crashed before acking: finish it)
        await _hand_off_if_pending(self._tasks, created.record)
        await delivery.done()

    async def _reject(
        self, store: Store, delivery: Delivery, reason: str, record: bool = True
    ) -> None:
        """Tell the sender: a failed record and event if the id is usable (and `record`),
        always a dead letter."""
        error = ErrorInfo(type=FailureType.INVALID_TASK, message=reason)
        task_id = task_id_of(delivery.data)
        await self._tasks.dead_letters.keep(
            tool=SUBMIT_DEAD_LETTER,
            subject=delivery.subject,
            data=delivery.data,
            error=error,
            task_id=task_id,
        )
        if task_id is not None and record:
            await _record_rejection(self._tasks, task_id, error, delivery.stream_sequence)
        await delivery.give_up()


def _decode(data: bytes, named: str, names: Names) -> TaskSubmit:
    """The submission on the subject of task `named`, or InvalidTaskError saying what is
    wrong: every decode failure is the sender's, so none may leave the message to come
    back for ever."""
    try:
        submit = submit_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidTaskError(str(exc)) from exc
    except RecursionError as exc:
        raise InvalidTaskError(NESTED) from exc
    validate_submit(submit)
    if submit.task_id != named:
        raise InvalidTaskError(
            f"a submission on the subject of task {named!r} is for task {submit.task_id!r}: "
            f"publish it on {names.submit_subject(submit.task_id)}"
        )
    return submit


async def _hand_off_if_pending(tasks: TaskService, record: TaskRecord) -> None:
    if record.status is TaskStatus.PENDING and record.current_step == 0:
        await tasks.hand_off_first(record)


async def _record_rejection(tasks: TaskService, task_id: str, error: ErrorInfo, seq: int) -> None:
    """A failed record for a rejected submission, unless the id already names a task."""
    now = utcnow()
    record = TaskRecord(
        task_id=task_id,
        status=TaskStatus.PENDING,
        steps=[],
        created_at=now,
        updated_at=now,
        submit_seq=seq,
    )
    created = await tasks.store.records.create(record)
    if created is None:
        existing = await tasks.store.records.get(task_id)
        if existing is None or existing.record.submit_seq != seq:
            return  # never fail someone else's task (nor a removed one's held-back id)
        created = existing
    await tasks.endings.fail(task_id, error, current=created)
