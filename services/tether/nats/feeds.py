"""Reading back what the streams and buckets hold: a task's events (replayed, then live),
its last event, the latest dead letters, updates of a record, all tasks' events.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from tether.cancellation import raise_if_cancelled
from tether.nats.failures import failures_translated, translated, translating
from tether.nats.replay import Replay
from tether.nats.store import Store
from tether.schemas.codec import event_decoder, record_decoder
from tether.schemas.events import AnyStatusEvent
from tether.schemas.records import TaskRecord
from tether.schemas.work import DeadLetter

_dead_letter_decoder = msgspec.json.Decoder(DeadLetter)


async def task_events(
    store: Store, task_id: str, timeout: float | None = None, after: int = 0
) -> AsyncIterator[tuple[AnyStatusEvent, int]]:
    """Every status event of a task (after stream sequence `after`) with its stream
    sequence: history first, then live, without a gap, through NATS restarts (see
    `Replay`). `timeout`: raise TimeoutError when no event comes that long (None: wait
    for ever)."""
    names = store.names
    subject = names.status_subject(task_id)
    async with Replay(store.nc, store.js, names.status_stream, subject, after) as replay:
        while True:
            msg = await replay.next(timeout)
            if msg is None:
                raise TimeoutError(f"no event of task {task_id!r} within {timeout}s")
            yield event_decoder.decode(msg.data), replay.seen


async def task_history(store: Store, task_id: str, limit: int = 10_000) -> list[AnyStatusEvent]:
    """The task's events so far (the latest `limit`), with no wait for more."""
    subject = store.names.status_subject(task_id)
    try:
        last = await store.js.get_last_msg(store.names.status_stream, subject)
    except NotFoundError:
        return []
    with failures_translated():
        sub = await store.js.subscribe(
            subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
    events: list[AnyStatusEvent] = []
    try:
        while True:
            with failures_translated():
                msg = await sub.next_msg(timeout=5)
            with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                events.append(event_decoder.decode(msg.data))
            if msg.metadata.num_pending == 0 or msg.metadata.sequence.stream >= (last.seq or 0):
                return events[-limit:]
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


@translated
async def last_event(store: Store, task_id: str) -> AnyStatusEvent | None:
    try:
        msg = await store.js.get_last_msg(
            store.names.status_stream, store.names.status_subject(task_id)
        )
    except NotFoundError:
        return None
    return event_decoder.decode(msg.data) if msg.data else None


@translated
async def dead_letters(store: Store, limit: int) -> list[DeadLetter]:
    """The latest `limit` dead letters, oldest first (foreign junk on the subject skipped)."""
    info = await store.js.stream_info(store.names.dead_letter_stream)
    state = info.state
    if not state.messages:
        return []
    start = max(state.first_seq, state.last_seq - limit + 1)
    sub = await store.js.subscribe(
        store.names.dead_letter_subjects,
        stream=store.names.dead_letter_stream,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start),
    )
    letters: list[DeadLetter] = []
    try:
        while True:
            msg = await sub.next_msg(timeout=5)
            with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                letters.append(_dead_letter_decoder.decode(msg.data))
            if msg.metadata.num_pending == 0:
                return letters[-limit:]
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


@translated
async def record_update(
    store: Store, task_id: str, condition: Callable[[TaskRecord], bool], window: float
) -> TaskRecord | None:
    """The first update of the record within `window` seconds that meets `condition`."""
    watcher = await store.records.watch(task_id)
    give_up = time.monotonic() + window
    try:
        while (left := give_up - time.monotonic()) > 0:
            raise_if_cancelled()
            try:
                entry = await watcher.updates(timeout=left)  # type: ignore[no-untyped-call]
            except TimeoutError:
                return None
            if entry is not None and entry.value:
                record = record_decoder.decode(entry.value)
                if condition(record):
                    return record
        return None
    finally:
        with contextlib.suppress(Exception):
            await watcher.stop()  # type: ignore[no-untyped-call]


@translated
async def record_end(store: Store, task_id: str, window: float) -> TaskRecord | None:
    """The record once the task has ended, if it ends within `window` seconds: woken by
    its end notice (one core subscription, filtered by the server; no consumer)."""
    notices = await store.nc.subscribe(store.names.ended_subject(task_id))
    give_up = time.monotonic() + window
    try:
        while True:
            # Read after subscribing (the server takes the SUB before this request): an
            # end between the two is in the record or in a notice, never lost.
            found = await store.records.get(task_id)
            if found is not None and found.record.status.is_terminal:
                return found.record
            left = give_up - time.monotonic()
            if left <= 0:
                return None
            try:
                await notices.next_msg(timeout=left)
            except nats.errors.TimeoutError:
                return None
    finally:
        with contextlib.suppress(Exception):
            await notices.unsubscribe()


@translating
class AllEvents:
    """Every task's status events (core NATS, live only), each handed to `on_event`."""

    def __init__(self, store: Store, on_event: Callable[[bytes], Any]) -> None:
        self._store = store
        self._on_event = on_event
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        async def received(msg: Msg) -> None:
            self._on_event(msg.data)

        names = self._store.names
        # every task's events, not what its agent is told (`<prefix>.status.<id>.inbox`)
        events = names.status_subject("*")
        self._subscription = await self._store.nc.subscribe(events, cb=received)

    async def stop(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
        self._subscription = None
