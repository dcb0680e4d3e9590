"""Task records in `<prefix>-tasks`: created once, changed only by compare-and-set, each
with its row in the status index."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from nats.js.kv import KeyValue

from tether.clock import utcnow
from tether.errors import (
    NatsUnavailableError,
    RevisionConflictError,
    TaskExistsError,
    TaskNotFoundError,
)
from tether.nats import headers
from tether.nats.connection import jetstream_context
from tether.nats.failures import failures_translated, translating
from tether.nats.jetstream import JetStream
from tether.nats.kv import Bucket, Entry, Removed
from tether.nats.recent import RecentRecords, Versioned
from tether.schemas.codec import encode, record_decoder
from tether.schemas.records import TaskRecord, TaskStatus

INDEX_TRIES_FOR = timedelta(seconds=30)
"""How long a row move is tried again while NATS does not answer (a cluster's failover
takes seconds); as long as a worker handles a step again in place."""
INDEX_PAUSE = 0.25
AT_ONCE = 64
STORED_ROWS = 10_000
"""How many tasks' last stored index rows a process remembers (`Records._leave`)."""
T = TypeVar("T")
log = logging.getLogger("tether.nats")
WATCH_INACTIVE = 5.0


def _free_at(note: bytes) -> datetime | None:
    try:
        return datetime.fromisoformat(note.decode())
    except ValueError:
        return None


def _revision_of(row: bytes) -> int:
    """The record revision an index row's payload holds (0: a row from before)."""
    return int(row) if row.isdigit() else 0


def _unfinished_before(subject: str, before_us: int) -> bool:
    """Whether an index row (`...index.<status>.<created µs>.<id>`) is of an unfinished
    status and of a task created before `before_us`."""
    status, stamp = subject.rsplit(".", 3)[1:3]
    return status in UNFINISHED and stamp.isdigit() and int(stamp) < before_us


UNFINISHED = frozenset(s.value for s in TaskStatus if not s.is_terminal)


def created_us(record: TaskRecord) -> int:
    """The record's creation time in µs: its index rows sort by it."""
    return int(record.created_at.timestamp() * 1_000_000)


@translating
class Records:
    def __init__(self, jetstream: JetStream, bucket: Bucket, indexing: bool = True) -> None:
        self._js = jetstream
        self._bucket = bucket
        self._names = jetstream.names
        self.indexing = indexing
        """Whether record writes keep the status index (`Layout.index_tasks`)."""
        self._stored: dict[str, tuple[str, int]] = {}
        """The subject and sequence of the index row this process stored last, by task."""
        self._moving: dict[str, asyncio.Future[None]] = {}
        """The last row move under way of each task (see `_move_soon`)."""
        self.recent: RecentRecords | None = None
        """Records written here, kept for a worker's next step (`Store.remember_records`)."""

    async def get(self, task_id: str) -> Versioned | None:
        found = await self._bucket.get(task_id)
        return None if found is None else Versioned(record_decoder.decode(found.value), found[1])

    async def check_free(self, task_id: str) -> None:
        """TaskExistsError when `task_id` names a task, or one `gc` removed so lately that
        JetStream still remembers its messages' ids (a new task under it would hang)."""
        found = await self._bucket.lookup(task_id)
        if isinstance(found, Entry):
            raise TaskExistsError(task_id)
        if isinstance(found, Removed):
            raise TaskExistsError(task_id, free_at=_free_at(found.note))

    async def mark_removed(self, task_id: str, keep_for: timedelta) -> None:
        """After `gc` removed a task: hold its id back for `keep_for` (the duplicate window),
        with the time it is free again in the marker."""
        free_at = utcnow() + keep_for
        note = free_at.isoformat().encode()
        await self._bucket.remove(task_id, note, keep_for.total_seconds())

    async def require(self, task_id: str) -> Versioned:
        found = await self.get(task_id)
        if found is None:
            raise TaskNotFoundError(task_id)
        return found

    async def create(self, record: TaskRecord) -> Versioned | None:
        """Create the record; None when a record with that id already exists."""
        data = encode(record)
        revision = await self._bucket.create(record.task_id, data)
        if revision is None:
            return None
        written = self._written(record, revision, len(data))  # before the index: see below
        await self.index(record, revision)
        return written

    async def create_or_find(self, record: TaskRecord) -> tuple[Versioned, bool]:
        """Create the record, or find the one already under its id (and False).

        TaskExistsError, saying when the id is free, when `gc` removed its task lately; a
        marker that expires between the create and the look is taken as free."""
        while True:
            created = await self.create(record)
            if created is not None:
                return created, True
            found = await self._bucket.lookup(record.task_id)
            if isinstance(found, Entry):
                existing = Versioned(record_decoder.decode(found.value), found.revision)
                # Its creator may have died before its row was stored: the same row again
                # (the same message id: a row that was stored is not stored twice).
                await self.index(existing.record, existing.revision)
                return existing, False
            if isinstance(found, Removed):
                raise TaskExistsError(record.task_id, free_at=_free_at(found.note))

    async def update(
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
            found = current or await self.require(task_id)
            new = change(found.record)
            if new is None:
                return found, False
            data = encode(new)
            try:
                revision = await self._bucket.update(task_id, data, found.revision)
            except RevisionConflictError:
                current = None
                continue
            if new.status is not found.record.status:
                self._move_soon(new, revision, found.record)
            return self._written(new, revision, len(data)), True

    def _move_soon(self, record: TaskRecord, revision: int, before: TaskRecord) -> None:
        """Move the task's row (`index`) without holding up the write that changed its
        status: a hand-off waiting on the index through a failover kept its step's message
        out long enough for a new leader to give it out again (the cluster chaos run saw
        checkpointed steps run twice). A task's moves from this process go in the order
        of its writes; `settled` waits for them before a process closes its connection."""
        if not self.indexing:
            return
        task_id = record.task_id
        move = asyncio.ensure_future(
            self._move_after(self._moving.get(task_id), record, revision, before)
        )
        self._moving[task_id] = move
        move.add_done_callback(functools.partial(self._moved, task_id))

    async def _move_after(
        self,
        previous: asyncio.Future[None] | None,
        record: TaskRecord,
        revision: int,
        before: TaskRecord,
    ) -> None:
        if previous is not None:
            with contextlib.suppress(Exception):  # said by its own callback
                await previous
        await self.index(record, revision, before)

    def _moved(self, task_id: str, move: asyncio.Future[None]) -> None:
        if self._moving.get(task_id) is move:
            del self._moving[task_id]
        if not move.cancelled() and (exc := move.exception()) is not None:
            log.warning(
                "the status index row of task %r was not moved (%s): lists may show it "
                "under its old status until 'tether gc --reindex'",
                task_id,
                exc,
            )

    async def settled(self) -> None:
        """Wait for the row moves under way (a process about to close, a test)."""
        while self._moving:
            await asyncio.gather(*self._moving.values(), return_exceptions=True)

    async def index(
        self, record: TaskRecord, revision: int, before: TaskRecord | None = None
    ) -> None:
        """Move the task's row in the status index (see `tether.tasks.listing`) for the
        record written at `revision`: store its row under its status (the revision its
        payload) and, when `before` had another status, delete the row it left, both at
        once, before the record write returns.

        A try NATS does not answer (a failover, a cut connection) is made again, for
        `INDEX_TRIES_FOR`, as much of it as is still this write's to make: once a later
        write changed the status, that write moves the row on, and a late row of ours
        would bring back one it has removed. The row's message id holds the revision, so
        a try the server did store is not stored twice, and a row a later write put back
        is never deleted. NatsUnavailableError when NATS is away for longer (the rows
        then wait for `tether gc --reindex`).
        """
        if not self.indexing:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INDEX_TRIES_FOR.total_seconds()
        tried = False
        while True:
            try:
                with failures_translated():
                    row, left = await self._moves(record, revision, before, tried)
                    stored = self._stored.pop(record.task_id, None)
                    moves = [] if left is None else [self._leave(record, left, revision, stored)]
                    if row is not None:
                        moves.append(self._put(record, row, revision))
                    await asyncio.gather(*moves)
                    await self._confirm(record, record.status, revision)
                return
            except NatsUnavailableError:
                if loop.time() > deadline:
                    raise
            tried = True
            await asyncio.sleep(INDEX_PAUSE)

    async def _moves(
        self, record: TaskRecord, revision: int, before: TaskRecord | None, again: bool
    ) -> tuple[TaskStatus | None, TaskStatus | None]:
        """The row to store and the row to delete; `again`, only if still this write's."""
        row: TaskStatus | None = record.status
        left = before.status if before is not None and before.status is not row else None
        if not again:
            return row, left
        found = await self.get(record.task_id)
        if found is None:
            return None, None  # removed meanwhile (`tether gc`)
        now = found.record.status
        if found.revision > revision:  # a later write moves the row on from ours
            row = row if now is row else None
            left = left if left is not now else None
        return row, left

    async def _put(self, record: TaskRecord, status: TaskStatus, revision: int) -> None:
        subject = self._row(record, status.value)
        sent = {headers.MSG_ID: f"{record.task_id}.{status.value}.{revision}"}
        ack = await self._js.publish(subject, str(revision).encode(), sent)
        self._stored[record.task_id] = (subject, ack.seq)
        if len(self._stored) > STORED_ROWS:
            self._stored.pop(next(iter(self._stored)))

    async def _confirm(self, record: TaskRecord, status: TaskStatus, revision: int) -> None:
        """Delete our row under `status` when the record has moved off it meanwhile: a
        later write (another process's, or one made while our try's answer was lost)
        may have looked for the row to delete before ours was stored, and would leave
        it behind for good. A row a later write put there is kept (`_delete_row`)."""
        found = await self.get(record.task_id)
        if found is None or found.revision <= revision or found.record.status is status:
            return  # (a read older than our write: a new leader may answer before it caught up)
        await self._delete_row(self._row(record, status.value), unless_from=revision + 1)

    async def _leave(
        self,
        record: TaskRecord,
        status: TaskStatus,
        revision: int,
        stored: tuple[str, int] | None,
    ) -> None:
        """Delete the task's row under `status`, unless a write after `revision` put it
        there (rows stored before their payload held a revision count as 0). The row
        this process stored last for the task (`stored`) is deleted by the sequence it
        was stored at, without a read: if that message is still there it is the
        subject's only one."""
        subject = self._row(record, status.value)
        stream = self._names.index_stream
        if stored is not None and stored[0] == subject:
            if await self._js.delete_message(stream, stored[1]):
                return
        await self._delete_row(subject, revision)

    async def _delete_row(self, subject: str, unless_from: int) -> None:
        stream = self._names.index_stream
        found = await self._js.last_message(stream, subject)
        if found is not None and _revision_of(found[1]) < unless_from:
            await self._js.delete_message(stream, found[0])

    async def reindex(self) -> int:
        """Store the index row of every record, and delete every row its record does
        not have (once, for records from before the index, or to repair it); returns
        how many records."""
        keys = await self._bucket.keys()
        found: list[Versioned | None] = []
        for start in range(0, len(keys), AT_ONCE):
            found += await asyncio.gather(*(self.get(k) for k in keys[start : start + AT_ONCE]))
        records = [f for f in found if f is not None]
        await self._each(records, lambda f: self._put(f.record, f.record.status, f.revision))
        has = {self._row(f.record, f.record.status.value) for f in records}
        await self._each([s for s in await self.index_rows() if s not in has], self._stale)
        return len(records)

    async def repair(self, settled_before_us: int) -> int:
        """Bring the index back to the records where a row move was lost (a process killed
        between a record write and its row move, which runs after it): every task with
        rows under two statuses, and every unfinished row of a task created before
        `settled_before_us`, is checked against its record. Returns the rows deleted."""
        rows = await self.index_rows()
        by_task: dict[str, list[str]] = {}
        for subject in rows:
            by_task.setdefault(subject.rsplit(".", 1)[1], []).append(subject)
        suspect = [
            subject
            for subjects in by_task.values()
            for subject in subjects
            if len(subjects) > 1 or _unfinished_before(subject, settled_before_us)
        ]
        deleted = [0]

        async def check(subject: str) -> None:
            deleted[0] += await self._stale(subject, put_back=True)

        await self._each(suspect, check)
        return deleted[0]

    async def _stale(self, subject: str, put_back: bool = False) -> bool:
        """Delete a row its record does not have, unless the record moved onto it meanwhile;
        `put_back`: and store the row the record does have (the same message id: a row
        that is there is not stored twice). Whether a row was deleted."""
        found = await self.get(subject.rsplit(".", 1)[1])
        if found is not None and self._row(found.record, found.record.status.value) == subject:
            return False
        await self._delete_row(subject, unless_from=found.revision + 1 if found else 2**63)
        if put_back and found is not None:
            await self.index(found.record, found.revision)
        return True

    @staticmethod
    async def _each(items: list[T], call: Callable[[T], Awaitable[object]]) -> None:
        for start in range(0, len(items), AT_ONCE):
            await asyncio.gather(*(call(item) for item in items[start : start + AT_ONCE]))

    def _row(self, record: TaskRecord, status: str) -> str:
        return self._names.index_subject(status, created_us(record), record.task_id)

    async def index_rows(self, status: str | None = None) -> list[str]:
        """The subjects of the index's rows (of one status, or all)."""
        return await self._js.subjects(self._names.index_stream, self._names.index_filter(status))

    async def index_is_empty(self) -> bool:
        info = await jetstream_context(self._js.nc).stream_info(self._names.index_stream)
        return not info.state.messages

    async def watch(self, task_id: str) -> KeyValue.KeyWatcher:
        """Updates of one record: the current value first, then a None marker, then changes."""
        # Gone from the server soon after `stop()`: else every wait for a task leaves a
        # consumer behind for nats-py's default 5 min.
        return await self._bucket.watch(task_id, WATCH_INACTIVE)

    async def list(self) -> list[TaskRecord]:
        """Every record, one read each (the status index is the cheap way to list)."""
        records = []
        for key in await self._bucket.keys():
            found = await self.get(key)
            if found is not None:
                records.append(found.record)
        return records

    def _written(self, record: TaskRecord, revision: int, size: int) -> Versioned:
        found = Versioned(record, revision)
        if self.recent is not None:
            self.recent.remember(found, size)
        return found
