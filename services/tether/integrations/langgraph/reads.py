"""Where the saver's reads of stored checkpoints go: the bucket, key by key (a thread's
latest checkpoint: a fixed number of reads however long its history), or one scan of
every key a listing may need, read a batch at a time (a listing of many checkpoints:
a few requests, rather than about ten per checkpoint)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from . import keys
from .bucket import SaverBucket
from .records import BlobRef


class Reads(Protocol):
    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of `keys`, in their order (None: not there)."""
        ...

    async def writes_of(self, thread_id: str, ns: str, checkpoint_id: str) -> list[str]:
        """The keys of one checkpoint's pending writes."""
        ...

    async def load_blob(self, ref: BlobRef) -> bytes:
        """A large value's bytes."""
        ...


class LiveReads:
    """Each read a request (or a few, at once) to the bucket."""

    def __init__(self, bucket: SaverBucket) -> None:
        self._bucket = bucket

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return await self._bucket.get_many(keys)

    async def writes_of(self, thread_id: str, ns: str, checkpoint_id: str) -> list[str]:
        return await self._bucket.keys(keys.writes_of(thread_id, ns, checkpoint_id))

    async def load_blob(self, ref: BlobRef) -> bytes:
        return await self._bucket.load_blob(ref)


class Scanned:
    """The keys of a scan (`SaverBucket.scan`), read from memory: what the scan did not
    find was not there when it ran. A blob is read once, however many of the listing's
    checkpoints hold its value."""

    def __init__(self, bucket: SaverBucket, found: dict[str, bytes]) -> None:
        self._bucket = bucket
        self._found = found
        self._blobs: dict[str, asyncio.Task[bytes]] = {}
        self._writes: dict[str, list[str]] = defaultdict(list)
        for key in found:
            if key.split(".", 2)[1] == keys.WRITE:
                self._writes[key.rsplit(".", 2)[0]].append(key)

    @classmethod
    async def of(cls, bucket: SaverBucket, thread_id: str | None) -> Scanned:
        """Every key of the thread (None: of every thread)."""
        match = ">" if thread_id is None else keys.thread_keys(thread_id)
        return cls(bucket, await bucket.scan(match))

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self._found.get(key) for key in keys]

    async def writes_of(self, thread_id: str, ns: str, checkpoint_id: str) -> list[str]:
        return list(self._writes.get(keys.checkpoint_writes(thread_id, ns, checkpoint_id), ()))

    async def load_blob(self, ref: BlobRef) -> bytes:
        if ref.ref not in self._blobs:  # checkpoints read at once wait for the same read
            reading = asyncio.ensure_future(self._bucket.load_blob(ref))
            reading.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._blobs[ref.ref] = reading
        return await asyncio.shield(self._blobs[ref.ref])
