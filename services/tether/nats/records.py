"""Task records in `<prefix>-tasks`: created once, changed only by compare-and-set, each
with its row in the status index."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from nats.js.kv import KeyValue

from tether.clock import utcnow
from tether.errors import RevisionConflictError, TaskExistsError, TaskNotFoundError
from tether.nats import headers
from tether.nats.connection import jetstream_context
from tether.nats.failures import translating
from tether.nats.jetstream import JetStream
from tether.nats.kv import Bucket, Entry, Removed
from tether.nats.recent import RecentRecords, Versioned
from tether.schemas.codec import encode, record_decoder
from tether.schemas.tasks import TaskRecord

ROW_LEFT = {headers.ROLLUP: "sub", headers.TTL: "1s"}
"""Replaces a task's old index row and expires (nats-server 2.11+ message TTLs)."""
WATCH_INACTIVE = 5.0


def _free_at(note: bytes) -> datetime | None:
    try:
        return datetime.fromisoformat(note.decode())
    except ValueError:
        return None


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
        await self.index(record)
        return self._written(record, revision, len(data))

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
                return Versioned(record_decoder.decode(found.value), found.revision), False
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
        stamp, nc = created_us(record), self._js.nc
        await nc.publish(self._names.index_subject(record.status.value, stamp, record.task_id))
        if before is not None:
            old = self._names.index_subject(before.status.value, stamp, record.task_id)
            await nc.publish(old, b"", headers=ROW_LEFT)

    async def reindex(self) -> int:
        """Write the index row of every record (once, for records from before the index);
        returns how many."""
        records = await self.list()
        for record in records:
            await self.index(record)
        await self._js.nc.flush()
        return len(records)

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
