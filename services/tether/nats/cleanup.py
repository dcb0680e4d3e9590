"""What the retention sweep (`tether.tasks.sweep`) reads and removes: every key's latest
value, every stored blob, all of one task, and graphs' threads. Removing is safe while
workers run: the record goes last, so a sweep cut off half-way finds the task again next
time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timedelta

from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from tether.nats import headers
from tether.nats.blobs import object_stream, stored_blob
from tether.nats.failures import translating
from tether.nats.store import Store

READ_TIMEOUT = 5.0
_REMOVED = ("DEL", "PURGE")


@translating
class Cleanup:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._names = store.names
        self._window: timedelta | None = None

    async def remove_blob(self, digest: str) -> None:
        await self._store.blobs.remove(digest)

    async def remove_task(self, task_id: str) -> None:
        names, js = self._names, self._store.js
        await js.purge_stream(
            names.kv_stream(names.checkpoints_bucket),
            subject=names.kv_subject(names.checkpoints_bucket, task_id + ".>"),
        )
        await js.purge_stream(names.status_stream, subject=names.status_subject(task_id))
        await js.purge_stream(names.status_stream, subject=names.inbox_subject(task_id))
        await js.purge_stream(names.index_stream, subject=names.index_rows_of(task_id))
        # The record goes last: a sweep cut off half-way finds the task again next time.
        await js.purge_stream(
            names.kv_stream(names.tasks_bucket),
            subject=names.kv_subject(names.tasks_bucket, task_id),
        )
        # Its messages' ids are remembered for the duplicate window: a new task under the
        # id would have its steps dropped as repeats, so the id is held back until then.
        await self._store.records.mark_removed(task_id, await self._hold_back())

    async def _hold_back(self) -> timedelta:
        """Twice the longest duplicate window of the streams a task's messages go to: the
        server forgets an id in a periodic sweep, so it may outlive the window a little
        (an id was still a duplicate 1.04 s into a 1 s window)."""
        if self._window is None:
            names = self._names
            streams = (names.work_stream, names.status_stream, names.submit_stream)
            infos = [await self._store.js.stream_info(stream) for stream in streams]
            longest = max(info.config.duplicate_window or 0 for info in infos)
            self._window = timedelta(seconds=2 * longest)
        return self._window

    async def has_graphs(self) -> bool:
        """Whether the installation has a graphs bucket (`Names.graphs_bucket`): made when
        a graph was first served, or by `tether provision`."""
        names = self._names
        try:
            await self._store.js.stream_info(names.kv_stream(names.graphs_bucket))
        except NotFoundError:
            return False
        return True

    async def stored_threads(self, threads: Iterable[str]) -> list[str]:
        """Those of `threads` (task ids) that the graphs bucket holds a checkpoint of."""
        return [thread for thread in threads if await self._roots(thread)]

    async def written_since(self, threads: Iterable[str], since: datetime) -> set[str]:
        """Those of `threads` whose newest checkpoint (in any namespace) was stored after
        `since`: one that a follow-up began running on while the sweep read."""
        stream = self._names.kv_stream(self._names.graphs_bucket)
        written = set()
        for thread in threads:
            for subject in await self._roots(thread):
                last = await self._store.js.get_last_msg(stream, subject)
                if last.time is not None and last.time > since:
                    written.add(thread)
                    break
        return written

    async def _roots(self, thread: str) -> list[str]:
        """The subjects of a thread's newest-checkpoint pointers, one per namespace."""
        names = self._names
        roots = names.kv_subject(names.graphs_bucket, names.graph_thread_roots(thread))
        stream = names.kv_stream(names.graphs_bucket)
        info = await self._store.js.stream_info(stream, subjects_filter=roots)
        return list(info.state.subjects or {})

    async def values(self, bucket: str) -> AsyncIterator[tuple[str, bytes]]:
        """The latest value of every key of a KV bucket; a removed key is skipped, even
        when its delete marker carries a note (a removed task's id is held back by one
        that says when it is free: see `Records.mark_removed`)."""
        names = self._names
        prefix = names.kv_subject(bucket)
        async for key, value, removed in self._values(names.kv_stream(bucket), prefix):
            if not removed:
                yield key, value

    async def stored_blobs(self) -> AsyncIterator[tuple[str, datetime]]:
        """Every blob's digest and when it was stored, from the Object Store's own meta
        subjects (nats-py's `ObjectStore.list` can wait for ever on a race of its watcher)."""
        bucket = self._names.blobs_bucket
        async for _, meta, _ in self._values(object_stream(bucket), f"$O.{bucket}.M."):
            found = stored_blob(meta)
            if found is not None:
                yield found

    async def _values(self, stream: str, prefix: str) -> AsyncIterator[tuple[str, bytes, bool]]:
        """The latest message of every subject under `prefix`, read as one ordered stream,
        and whether it is a KV delete marker."""
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
                removed = (msg.headers or {}).get(headers.KV_OPERATION) in _REMOVED
                if msg.data:
                    yield msg.subject[len(prefix) :], msg.data, removed
                if msg.metadata.num_pending == 0:
                    return
        finally:
            await sub.unsubscribe()
