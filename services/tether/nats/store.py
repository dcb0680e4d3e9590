"""Tether's durable state on JetStream: task records, checkpoints, events, work, dead letters.

Everything that reads or writes that state goes through `Store`, so the rules of each
object (create-only checkpoints, compare-and-set records, `Nats-Msg-Id` on work) hold
in one place.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    NoStreamResponseError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from tether.errors import NatsUnavailableError, RevisionConflictError, TaskNotFoundError
from tether.nats.blobs import Blobs
from tether.nats.connection import translating
from tether.nats.delivery import Consumer
from tether.nats.limits import check_message, check_value, max_value
from tether.nats.provision import (
    ConsumerOptions,
    Layout,
    ensure_dispatcher_consumer,
    ensure_timers_consumer,
    ensure_tool_consumer,
    open_installation,
)
from tether.nats.recent import RecentRecords, Versioned
from tether.nats.replies import PubAck, pub_ack_decoder, stream_subjects_decoder
from tether.nats.requests import Requester
from tether.nats.schedules import schedule_headers
from tether.schemas.codec import checkpoint_decoder, encode, record_decoder
from tether.schemas.events import (
    AnyStatusEvent,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
)
from tether.schemas.names import Names
from tether.schemas.tasks import (
    Checkpoint,
    DeadLetter,
    Heartbeat,
    TaskRecord,
    TaskSubmit,
    Timer,
    TokenChunk,
    ToolInfo,
    WorkerBeat,
    WorkMessage,
)
from tether.tasks.listing import created_us

_tool_decoder = msgspec.json.Decoder(ToolInfo)
MSG_ID: str = Header.MSG_ID.value
_PROGRESS_EVENTS = (Submitted, StepStarted, StepCompleted, StepRetrying)
_heartbeat_decoder = msgspec.json.Decoder(Heartbeat)
_worker_decoder = msgspec.json.Decoder(WorkerBeat)
LIVE_FOR = timedelta(seconds=30)
"""A worker whose last beat is older is not listed as serving anything."""


def worker_key(worker_id: str) -> str:
    """The worker's key in the workers bucket: one token (its steps are under it)."""
    return re.sub(r"[^A-Za-z0-9_=-]", "_", worker_id)


EXPECTED_LAST_SUBJECT_SEQUENCE: str = Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value
_ROW_LEFT = {Header.ROLLUP.value: "sub", "Nats-TTL": "1s"}
"""Replaces a task's old index row and expires (nats-server 2.11+ message TTLs)."""
Headers = dict[str, str] | None
_GONE = {"KV-Operation": "DEL", "Nats-TTL": "30s"}


PUBLISH_TIMEOUT = 5.0
WATCH_INACTIVE = 5.0


class Observer(Protocol):
    """Told what this process writes (`tether.metrics.Metrics`)."""

    def observe(self, event: AnyStatusEvent) -> None: ...
    def dead_lettered(self, letter: DeadLetter) -> None: ...


@translating
class Store:
    """Keys are not re-validated here: task ids and tool names are checked where they
    enter (dispatcher, worker, client, API), and the hot path saves the regex."""

    def __init__(
        self,
        nc: NatsClient,
        js: JetStreamContext,
        names: Names,
        buckets: dict[str, KeyValue],
    ) -> None:
        self.nc = nc
        self.js = js
        self._requests = Requester(nc, PUBLISH_TIMEOUT)
        self.names = names
        self._tasks = buckets["tasks"]
        self._checkpoints = buckets["checkpoints"]
        self._heartbeats = buckets["heartbeats"]
        self._tools = buckets["tools"]
        self._workers = buckets["workers"]
        self._workers_prefix = names.kv_subject(names.workers_bucket)
        self._tasks_prefix = names.kv_subject(names.tasks_bucket)
        self._checkpoints_prefix = names.kv_subject(names.checkpoints_bucket)
        self.direct_reads = False
        """Whether the buckets answer direct gets (single server: yes; a cluster: no)."""
        self.recent: RecentRecords | None = None
        """Records written through this store, kept for workers (`remember_records`)."""
        self.blobs: Blobs  # set by `open`
        self.observer: Observer | None = None
        self.indexing = True
        """Whether record writes keep the status index (`Layout.index_tasks`)."""

    @classmethod
    async def open(
        cls, nc: NatsClient, layout: Layout | None = None, provision: bool = True
    ) -> Store:
        """Bind to Tether's buckets; with `provision`, create (idempotently) what is
        missing first, else raise NotProvisionedError naming it."""
        layout = layout or Layout()
        js = nc.jetstream()
        names = layout.names
        try:
            await open_installation(js, layout, provision)
        except NoRespondersError as exc:
            raise NatsUnavailableError(
                "the NATS server has no JetStream: start it with JetStream enabled (-js)"
            ) from exc
        buckets = {
            "tasks": await js.key_value(names.tasks_bucket),
            "checkpoints": await js.key_value(names.checkpoints_bucket),
            "heartbeats": await js.key_value(names.heartbeats_bucket),
            "tools": await js.key_value(names.tools_bucket),
            "workers": await js.key_value(names.workers_bucket),
        }
        store = cls(nc, js, names, buckets)
        bucket = names.blobs_bucket
        store.blobs = Blobs(js, await js.object_store(bucket), bucket, layout.blob_threshold)
        store.indexing = layout.index_tasks
        await store._requests.start()
        info = await js.stream_info(names.kv_stream(names.tasks_bucket))
        store.direct_reads = bool(info.config.allow_direct)
        return store

    async def tool_consumer(self, tool: str, options: ConsumerOptions) -> Consumer:
        """The durable pull consumer of a tool's work, created or updated, then bound."""
        await ensure_tool_consumer(self.js, tool, options, self.names)
        return await Consumer.bind(self.js, self.names.work_stream, self.names.tool_consumer(tool))

    async def submit_consumer(self) -> Consumer:
        """The dispatchers' shared consumer of submissions."""
        await ensure_dispatcher_consumer(self.js, self.names)
        names = self.names
        return await Consumer.bind(self.js, names.submit_stream, names.dispatcher_consumer)

    async def timers_consumer(self) -> Consumer:
        """The dispatchers' shared consumer of fired timers."""
        await ensure_timers_consumer(self.js, self.names)
        return await Consumer.bind(self.js, self.names.work_stream, self.names.timers_consumer)

    async def remember_records(self, on_cancel: Callable[[str], None]) -> None:
        """Keep the records this store writes (see `RecentRecords`) and follow the
        cancellation notices that invalidate them; `on_cancel` hears each one too."""
        recent = self.recent = RecentRecords(lambda: self.nc.stats["reconnects"])
        prefix = len(self.names.cancel_notice_subject(""))

        async def cancelled(msg: Msg) -> None:
            task_id = msg.subject[prefix:]
            recent.forget(task_id)
            on_cancel(task_id)

        await self.nc.subscribe(self.names.cancel_notice_subject("*"), cb=cancelled)

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts, headers included."""
        return int(self.nc.max_payload)

    @property
    def max_value(self) -> int:
        """The largest record, checkpoint or memo this store writes (see `limits`)."""
        return max_value(self.nc.max_payload)

    async def answers(self, subject: str, timeout: float) -> bool:
        """Whether anyone replies to a request on `subject` within `timeout`."""
        try:
            await self.nc.request(subject, b"", timeout=timeout)
        except (NoRespondersError, NatsTimeoutError):
            return False
        return True

    async def notify_cancelled(self, task_id: str) -> None:
        """Tell every worker at once (core NATS) that a task was cancelled."""
        await self.nc.publish(self.names.cancel_notice_subject(task_id))

    # -- JetStream publishes ----------------------------------------------------
    async def _publish(self, subject: str, data: bytes, headers: dict[str, str] | None) -> PubAck:
        """A JetStream publish that waits for the PubAck; errors keep NATS's codes."""
        try:
            reply = await self._requests.request(subject, data, headers)
        except NoRespondersError as exc:
            raise NoStreamResponseError from exc
        ack = pub_ack_decoder.decode(reply.data)
        if ack.error is not None:
            raise ack.error.exception()
        return ack

    async def _read(self, bucket: KeyValue, prefix: str, key: str) -> tuple[bytes, int] | None:
        """A key's latest value and revision: one direct get when the bucket allows it."""
        if not self.direct_reads:
            try:
                entry = await bucket.get(key, validate_keys=False)
            except KeyNotFoundError:
                return None
            return (entry.value, entry.revision or 0) if entry.value else None
        stream = self.names.kv_stream(prefix[4:-1])
        subject = self.names.direct_get_subject(stream, prefix + key)
        reply = await self._requests.request(subject, b"", None)
        headers = reply.headers or {}
        if headers.get("KV-Operation") in ("DEL", "PURGE") or headers.get("Status") == "404":
            return None  # deleted, or never written
        if "Status" in headers:
            raise APIError(
                code=int(headers.get("Status") or 0), description=headers.get("Description", "")
            )
        return reply.data, int(headers["Nats-Sequence"])

    async def _write(self, subject: str, data: bytes, last: int) -> int:
        """Compare-and-set one KV key (`last=0`: create only); returns the new revision."""
        check_value(f"the value of {subject}", data, self.nc.max_payload)
        headers = {EXPECTED_LAST_SUBJECT_SEQUENCE: str(last)}
        return (await self._publish(subject, data, headers)).seq

    # -- task records --------------------------------------------------------
    async def get_record(self, task_id: str) -> Versioned | None:
        found = await self._read(self._tasks, self._tasks_prefix, task_id)
        if found is None:
            return None
        return Versioned(record_decoder.decode(found[0]), found[1])

    async def require_record(self, task_id: str) -> Versioned:
        found = await self.get_record(task_id)
        if found is None:
            raise TaskNotFoundError(task_id)
        return found

    async def create_record(self, record: TaskRecord) -> Versioned | None:
        """Create the record; None when a record with that id already exists."""
        try:
            data = encode(record)
            revision = await self._write(self._tasks_prefix + record.task_id, data, 0)
        except RevisionConflictError:
            return None
        await self.index(record)
        return self._written(record, revision, len(data))

    async def update_record(
        self,
        task_id: str,
        change: Callable[[TaskRecord], TaskRecord | None],
        current: Versioned | None = None,
    ) -> tuple[Versioned, bool]:
        """Apply `change` by compare-and-set, re-reading and re-applying on a conflict.

        `change` returns the new record, or None to leave it as it is. Returns the
        record as stored and whether this call changed it.
        """
        while True:
            found = current or await self.require_record(task_id)
            new = change(found.record)
            if new is None:
                return found, False
            data = encode(new)
            try:
                revision = await self._write(self._tasks_prefix + task_id, data, found.revision)
            except RevisionConflictError:
                current = None
                continue
            if new.status is not found.record.status:
                await self.index(new, found.record)
            return self._written(new, revision, len(data)), True

    async def index(self, record: TaskRecord, before: TaskRecord | None = None) -> None:
        """Move the task's row in the status index (see `tether.tasks.listing`).

        Published without waiting: a row is a hint the reader checks against the record,
        so a lost one costs a missing or a skipped row, never a wrong answer. The row a
        task leaves is rolled up into an empty marker that expires a second later.
        """
        if not self.indexing:
            return
        stamp = created_us(record.created_at)
        subject = self.names.index_subject(record.status.value, stamp, record.task_id)
        await self.nc.publish(subject, b"")
        if before is not None:
            old = self.names.index_subject(before.status.value, stamp, record.task_id)
            await self.nc.publish(old, b"", headers=_ROW_LEFT)

    async def reindex(self) -> int:
        """Write the index row of every record (once, for records from before the index);
        returns how many."""
        records = await self.list_records()
        for record in records:
            await self.index(record)
        await self.nc.flush()
        return len(records)

    async def index_rows(self, status: str | None = None) -> list[str]:
        """The subjects of the index's rows (of one status, or all)."""
        return await self._subjects(self.names.index_stream, self.names.index_filter(status))

    async def index_is_empty(self) -> bool:
        info = await self.js.stream_info(self.names.index_stream)
        return not info.state.messages

    def _written(self, record: TaskRecord, revision: int, size: int) -> Versioned:
        found = Versioned(record, revision)
        if self.recent is not None:
            self.recent.remember(found, size)
        return found

    async def watch_record(self, task_id: str) -> KeyValue.KeyWatcher:
        """Updates of one record: the current value first, then a None marker, then changes."""
        # Gone from the server soon after `stop()` (nats-py only unsubscribes): else
        # every wait for a task leaves a consumer behind for nats-py's default 5 min.
        return await self._tasks.watch(task_id, inactive_threshold=WATCH_INACTIVE)

    async def keys(self, bucket: str, match: str = ">") -> list[str]:
        """The keys in a bucket that `match` (a subject pattern; deleted keys included:
        reads skip those).

        nats-py's `KeyValue.keys()` can come back empty when its watcher's consumer
        info overtakes the entries it has not processed yet.
        """
        prefix = self.names.kv_subject(bucket)
        subjects = await self._subjects(self.names.kv_stream(bucket), prefix + match)
        return [subject[len(prefix) :] for subject in subjects]

    async def _subjects(self, stream: str, subjects_filter: str) -> list[str]:
        """The subjects of a stream's messages, read from its subject list, a page of up
        to 100,000 per request."""
        found: list[str] = []
        while True:
            body = encode({"subjects_filter": subjects_filter, "offset": len(found)})
            subject = self.names.stream_info_subject(stream)
            reply = await self._requests.request(subject, body, None)
            info = stream_subjects_decoder.decode(reply.data)
            if info.error is not None:
                raise info.error.exception()
            page = info.state.subjects if info.state and info.state.subjects else {}
            found.extend(page)
            if not page or len(found) >= info.total:
                return found

    async def list_records(self) -> list[TaskRecord]:
        keys = await self.keys(self.names.tasks_bucket)
        records = []
        for key in keys:
            found = await self.get_record(key)
            if found is not None:
                records.append(found.record)
        return records

    # -- checkpoints ---------------------------------------------------------
    async def get_checkpoint(
        self, task_id: str, step: int, branch: int | None = None
    ) -> Checkpoint | None:
        found = await self.get_memo(self.names.step_key(task_id, step, branch))
        return None if found is None else checkpoint_decoder.decode(found)

    async def create_checkpoint(
        self, task_id: str, step: int, checkpoint: Checkpoint, branch: int | None = None
    ) -> Checkpoint:
        """Store `checkpoint` unless one exists; return the one that won."""
        key = self.names.step_key(task_id, step, branch)
        try:
            await self._write(self._checkpoints_prefix + key, encode(checkpoint), 0)
        except RevisionConflictError:
            existing = await self.get_checkpoint(task_id, step, branch)
            if existing is None:  # deleted in between: ours is as good as any
                raise
            return existing
        return checkpoint

    async def get_memo(self, key: str) -> bytes | None:
        found = await self._read(self._checkpoints, self._checkpoints_prefix, key)
        return None if found is None else found[0]

    async def create_memo(self, key: str, value: bytes) -> bytes:
        """Store a memoized side effect's result create-only; return the stored bytes."""
        try:
            await self._write(self._checkpoints_prefix + key, value, 0)
        except RevisionConflictError:
            existing = await self.get_memo(key)
            if existing is None:
                raise
            return existing
        return value

    # -- streams -------------------------------------------------------------
    async def publish_work(
        self, work: WorkMessage, msg_id: str, at: datetime | None = None
    ) -> bool:
        """Hand a step to its tool's consumer; False when the server saw `msg_id` already.

        `at`: not before then. The message waits on the task's timer subject as a
        message schedule, which the server stores like any message (so it survives a
        restart) and delivers to the work subject on time; a replayed hand-off replaces
        the schedule of the same message, so it cannot wake the task twice.
        """
        target = self.names.work_subject(work.tool)
        if at is None:
            ack = await self._publish(target, encode(work), {MSG_ID: msg_id})
            return not ack.duplicate
        subject = self.names.timer_subject(msg_id)
        await self._schedule(subject, target, encode(work), at, {MSG_ID: msg_id})
        return True

    async def set_timer(self, subject: str, timer: Timer, at: datetime) -> None:
        """Fire `timer` on the timers subject at `at`; setting it again replaces it."""
        await self._schedule(subject, self.names.timers_work_subject, encode(timer), at)

    async def _schedule(
        self, subject: str, target: str, data: bytes, at: datetime, headers: Headers = None
    ) -> None:
        await self._publish(subject, data, {**(headers or {}), **schedule_headers(at, target)})

    async def emit(self, event: AnyStatusEvent, n: int = 0) -> None:
        """Publish a status event; its `Nats-Msg-Id` makes a replayed step's events no-ops.

        Events that end or pause a task wait for JetStream's acknowledgement. Progress
        events are published without waiting: the stream still stores them, in order,
        and the task record, not the event log, is what the protocol relies on.
        """
        msg_id = self.names.event_msg_id(
            event.task_id, event.kind, event.step, event.generation, n, event.branch
        )
        subject = self.names.status_subject(event.task_id)
        headers = {MSG_ID: msg_id}
        data = encode(event)
        if self.observer is not None:
            self.observer.observe(event)
        if isinstance(event, _PROGRESS_EVENTS):
            check_message(subject, data, headers, self.nc.max_payload)
            await self.nc.publish(subject, data, headers=headers)
        else:
            await self._publish(subject, data, headers)

    async def publish_token(self, chunk: TokenChunk) -> None:
        """Publish a piece of streamed text; an attempt's last one waits for its ack, so
        every chunk before it (same connection, same order) is stored when it returns."""
        subject = self.names.tokens_subject(chunk.task_id)
        if chunk.done:
            await self._publish(subject, encode(chunk), None)
        else:
            await self.nc.publish(subject, encode(chunk))

    async def publish_submit(self, submit: TaskSubmit, headers: Headers = None) -> bool:
        """Queue a submission for the dispatcher; False when its id was seen in the window.
        `headers`: more headers (the submitter's trace context)."""
        data = encode(submit)  # the client checks the size first; `_publish` the exact limit
        sent = {**(headers or {}), MSG_ID: submit.task_id}
        ack = await self._publish(self.names.submit_subject, data, sent)
        return not ack.duplicate

    async def dead_letter(self, letter: DeadLetter) -> None:
        await self._publish(self.names.dead_letter_subject(letter.tool), encode(letter), None)
        if self.observer is not None:
            self.observer.dead_lettered(letter)

    # -- heartbeats and tools ------------------------------------------------
    async def beat(self, heartbeat: Heartbeat) -> None:
        data = encode(heartbeat)
        check_value(f"the heartbeat of task {heartbeat.task_id!r}", data, self.nc.max_payload)
        await self._heartbeats.put(heartbeat.task_id, data)

    async def get_heartbeat(self, task_id: str) -> Heartbeat | None:
        """The running step's heartbeat, its `time` the last beat of the worker that
        holds it (a held step writes its own only once, and on progress)."""
        try:
            entry = await self._heartbeats.get(task_id)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        heartbeat = _heartbeat_decoder.decode(entry.value)
        found = await self.worker_entry(worker_key(heartbeat.worker_id))
        if found is not None:
            beat = _worker_decoder.decode(found[0])
            if beat.claimed_by is None and beat.time > heartbeat.time:
                return msgspec.structs.replace(heartbeat, time=beat.time)
        return heartbeat

    async def beat_worker(self, beat: WorkerBeat) -> None:
        await self.put_worker_entry(worker_key(beat.worker_id), encode(beat))

    async def forget_worker(self, worker_id: str) -> None:
        await self.remove_worker_entry(worker_key(worker_id))

    async def worker_entry(self, key: str) -> tuple[bytes, int] | None:
        """A beat or a held step in the workers bucket, with its revision."""
        return await self._read(self._workers, self._workers_prefix, key)

    async def put_worker_entry(self, key: str, data: bytes, last: int | None = None) -> int:
        """Write a beat or a held step (compare-and-set with `last`); its revision."""
        if last is not None:
            return await self._write(self._workers_prefix + key, data, last)
        return (await self._publish(self._workers_prefix + key, data, None)).seq

    async def remove_worker_entry(self, key: str) -> None:
        """Delete a beat or a held step with a marker that expires (a plain KV delete
        would leave one behind for every step ever held)."""
        await self._publish(self._workers_prefix + key, b"", _GONE)

    async def acknowledge(self, ack_subject: str) -> None:
        """Acknowledge a message another process received (its holder died)."""
        await self.nc.publish(ack_subject, b"+ACK")

    async def publish_raw(self, subject: str, data: bytes, headers: dict[str, str]) -> bool:
        """Publish an encoded message (a held step again); False for a duplicate id."""
        return not (await self._publish(subject, data, headers)).duplicate

    async def list_workers(self) -> list[WorkerBeat]:
        """Every worker that beat within `LIVE_FOR`, by id."""
        names = self.names
        prefix = names.kv_subject(names.workers_bucket)
        subjects = await self._subjects(names.kv_stream(names.workers_bucket), prefix + "*")
        workers = []
        since = datetime.now(UTC) - LIVE_FOR
        for subject in sorted(subjects):
            with contextlib.suppress(KeyNotFoundError):
                entry = await self._workers.get(subject[len(prefix) :])
                if entry.value:
                    beat = _worker_decoder.decode(entry.value)
                    if beat.time >= since and beat.claimed_by is None:
                        workers.append(beat)
        return workers

    async def tool_backlog(self, tool: str) -> tuple[int, int, int] | None:
        """A tool's queue, steps in flight and redeliveries, from its consumer (None when
        no worker has served it yet)."""
        try:
            info = await self.js.consumer_info(
                self.names.work_stream, self.names.tool_consumer(tool)
            )
        except NotFoundError:
            return None
        pending, in_flight = int(info.num_pending or 0), int(info.num_ack_pending or 0)
        return pending, in_flight, int(info.num_redelivered or 0)

    async def register_tool(self, info: ToolInfo) -> None:
        await self._tools.put(info.name, encode(info))

    async def list_tools(self) -> list[ToolInfo]:
        """Every tool a worker has advertised, by name."""
        keys = await self.keys(self.names.tools_bucket)
        tools = [await self.get_tool(key) for key in sorted(keys)]
        return [tool for tool in tools if tool is not None]

    async def get_tool(self, name: str) -> ToolInfo | None:
        try:
            entry = await self._tools.get(name)
        except KeyNotFoundError:
            return None
        return _tool_decoder.decode(entry.value) if entry.value else None
