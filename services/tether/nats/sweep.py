"""The retention sweep: finished tasks past their retention, and blobs nothing refers to.

Run by `tether gc` (from cron, a Kubernetes CronJob, or by hand). It is safe to run
while workers run and to run twice at once: it removes only finished tasks, and a
blob only when no record or checkpoint kept refers to it and it is past the grace
period (see `tether.tasks.retention`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nats.js.api import DeliverPolicy

from tether.nats.blobs import object_stream, stored_blob
from tether.nats.connection import translating
from tether.nats.store import Store
from tether.schemas.codec import record_decoder
from tether.tasks.retention import BLOB_GRACE, DEFAULT_RETENTION, expired, garbage
from tether.tasks.retention import referenced_blobs as refs_in

READ_TIMEOUT = 5.0


@dataclass
class SweepReport:
    """What a sweep removed (or, with `dry_run`, would remove)."""

    tasks: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    kept_tasks: int = 0
    kept_blobs: int = 0


@translating
class Sweeper:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._names = store.names

    async def sweep(
        self,
        retention: timedelta = DEFAULT_RETENTION,
        grace: timedelta = BLOB_GRACE,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> SweepReport:
        now = now or datetime.now(UTC)
        report = SweepReport()
        # Blobs are listed first: one stored after this point is not considered at all.
        blobs = [found async for found in self._stored_blobs()]
        referenced: set[str] = set()
        async for task_id, value in self._bucket(self._names.tasks_bucket):
            if expired(record_decoder.decode(value), now, retention):
                report.tasks.append(task_id)
            else:
                report.kept_tasks += 1
                referenced |= refs_in(value)
        gone = set(report.tasks)
        async for key, value in self._bucket(self._names.checkpoints_bucket):
            if key.split(".", 1)[0] not in gone:
                referenced |= refs_in(value)
        report.blobs = garbage(blobs, referenced, now, grace)
        report.kept_blobs = len(blobs) - len(report.blobs)
        if not dry_run:
            for task_id in report.tasks:
                await self._remove_task(task_id)
            for digest in report.blobs:
                await self._store.blobs.remove(digest)
        return report

    async def _remove_task(self, task_id: str) -> None:
        names, js = self._names, self._store.js
        await js.purge_stream(
            names.kv_stream(names.checkpoints_bucket),
            subject=names.kv_subject(names.checkpoints_bucket, task_id + ".>"),
        )
        await js.purge_stream(names.status_stream, subject=names.status_subject(task_id))
        await js.purge_stream(names.index_stream, subject=names.index_rows_of(task_id))
        # The record goes last: a sweep cut off half-way finds the task again next time.
        await js.purge_stream(
            names.kv_stream(names.tasks_bucket),
            subject=names.kv_subject(names.tasks_bucket, task_id),
        )

    def _bucket(self, bucket: str) -> AsyncIterator[tuple[str, bytes]]:
        """The latest value of every key of a KV bucket."""
        names = self._names
        return self._values(names.kv_stream(bucket), names.kv_subject(bucket))

    async def _stored_blobs(self) -> AsyncIterator[tuple[str, datetime]]:
        """Every blob's digest and when it was stored, from the Object Store's own meta
        subjects (nats-py's `ObjectStore.list` can wait for ever on a race of its watcher)."""
        bucket = self._names.blobs_bucket
        async for _, meta in self._values(object_stream(bucket), f"$O.{bucket}.M."):
            found = stored_blob(meta)
            if found is not None:
                yield found

    async def _values(self, stream: str, prefix: str) -> AsyncIterator[tuple[str, bytes]]:
        """The latest message of every subject under `prefix`, read as one ordered stream."""
        info = await self._store.js.stream_info(stream)
        if not info.state.messages:
            return
        sub = await self._store.js.subscribe(
            prefix + ">",
            stream=stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        )
        try:
            while True:
                msg = await sub.next_msg(timeout=READ_TIMEOUT)
                if msg.data:
                    yield msg.subject[len(prefix) :], msg.data
                if msg.metadata.num_pending == 0:
                    return
        finally:
            await sub.unsubscribe()
