"""A saver's KV bucket and blob store, through Tether's NATS seam (`tether.nats`): the
one key-value primitive (`Bucket`), the blob store (`Blobs`) and the seam's error
translation, so the saver imports no NATS client of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence

import msgspec

from tether.errors import JetStreamError, RevisionConflictError, TetherError
from tether.nats.blobs import Blobs, object_stream
from tether.nats.codes import STREAM_NAME_IN_USE, STREAM_NOT_FOUND
from tether.nats.connection import Connection, jetstream_context
from tether.nats.failures import failures_translated, translating
from tether.nats.jetstream import JetStream
from tether.nats.kv import Bucket
from tether.nats.provision import forbid_rollups
from tether.schemas.names import DEFAULT_NAMES

from .records import BlobRef


class SaverNotSetUpError(TetherError, LookupError):
    """The saver's bucket is not on the NATS server: call `setup()` once."""

    def __init__(self, bucket: str) -> None:
        super().__init__(
            f"the checkpoint bucket {bucket!r} does not exist on this NATS server: call "
            "saver.setup() (or `await saver.asetup()`) once to create it"
        )
        self.bucket = bucket


def blobs_bucket(bucket: str) -> str:
    """The Object Store bucket of a saver's large values: `<bucket>-blobs`, apart from
    Tether's own `<prefix>-blobs`, whose sweep (`tether gc`) keeps only the blobs Tether's
    tasks refer to."""
    return f"{bucket}-blobs"


async def create_buckets(nc: Connection, bucket: str, replicas: int) -> None:
    """Create the KV bucket and the blob store of a saver; one that exists is left as it is."""
    js = jetstream_context(nc)
    # Direct gets answer a read in one request; a replicated bucket reads from its
    # leader instead, as Tether's own buckets do (`tether.nats.layout`).
    direct = replicas == 1
    made = False
    with _unless_in_use(), failures_translated():
        await js.create_key_value(bucket=bucket, history=1, replicas=replicas, direct=direct)
        made = True
    if made:  # (an existing one may belong to a user who may not update it)
        with failures_translated():
            await forbid_rollups(js, DEFAULT_NAMES.kv_stream(bucket))
    made = False
    with _unless_in_use(), failures_translated():
        await js.create_object_store(blobs_bucket(bucket), replicas=replicas)
        made = True
    if made:  # blobs are stored without a rollup (`tether.nats.blobs`)
        with failures_translated():
            await forbid_rollups(js, object_stream(blobs_bucket(bucket)))


async def delete_buckets(nc: Connection, bucket: str) -> None:
    """Remove a saver's bucket and blob store with everything in them."""
    js = jetstream_context(nc)
    for stream in (DEFAULT_NAMES.kv_stream(bucket), object_stream(blobs_bucket(bucket))):
        with _unless_missing(), failures_translated():
            await js.delete_stream(stream)


@contextlib.contextmanager
def _unless_in_use() -> Iterator[None]:
    try:
        yield
    except JetStreamError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise


@contextlib.contextmanager
def _unless_missing() -> Iterator[None]:
    try:
        yield
    except JetStreamError as exc:
        if exc.err_code != STREAM_NOT_FOUND:
            raise


@translating
class SaverBucket:
    """One saver's keys and blobs. Keys are built by `keys`; values are bytes here."""

    def __init__(self, nc: Connection, name: str) -> None:
        self.name = name
        self._js = jetstream_context(nc)
        self._jetstream = JetStream(nc, DEFAULT_NAMES)
        self._stream = DEFAULT_NAMES.kv_stream(name)
        self._bucket: Bucket | None = None
        self._blobs: Blobs | None = None

    async def open(self) -> None:
        """Bind to the bucket and its blob store; SaverNotSetUpError when they are not there."""
        blobs = blobs_bucket(self.name)
        try:
            with failures_translated():
                info = await self._js.stream_info(self._stream)
                await self._js.stream_info(object_stream(blobs))
        except JetStreamError as exc:
            if exc.err_code == STREAM_NOT_FOUND:
                raise SaverNotSetUpError(self.name) from None
            raise
        await self._jetstream.start()
        kv = await self._js.key_value(self.name)
        store = await self._js.object_store(blobs)
        direct = bool(info.config.allow_direct)
        self._bucket = Bucket(self._jetstream, kv, self.name, direct)
        # Every blob is stored because the saver chose to (`threshold` 0): see `store_blob`.
        self._blobs = Blobs(self._js, store, blobs, threshold=0)

    @property
    def kv(self) -> Bucket:
        assert self._bucket is not None, "open() first"
        return self._bucket

    @property
    def blobs(self) -> Blobs:
        assert self._blobs is not None, "open() first"
        return self._blobs

    async def get(self, key: str) -> bytes | None:
        entry = await self.kv.get(key)
        return entry.value if entry is not None else None

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of `keys`, read concurrently, in their order."""
        return list(await asyncio.gather(*(self.get(key) for key in keys)))

    async def scan(self, match: str) -> dict[str, bytes]:
        """The values of every key that `match` (a subject filter), read in batches."""
        return await self.kv.scan(match)

    async def revision(self, key: str) -> tuple[bytes, int] | None:
        entry = await self.kv.get(key)
        return (entry.value, entry.revision) if entry is not None else None

    async def put(self, key: str, value: bytes) -> None:
        await self.kv.put(key, value)

    async def create(self, key: str, value: bytes) -> bool:
        """Write a key that is not there; False when it is."""
        return await self.kv.create(key, value) is not None

    async def swap(self, key: str, value: bytes, revision: int) -> bool:
        """Compare-and-set (`revision` 0: absent); False when another write came first."""
        try:
            await self.kv.update(key, value, revision)
        except RevisionConflictError:
            return False
        return True

    async def keys(self, match: str) -> list[str]:
        """The keys that `match` (a subject filter), from the stream's subject list."""
        return await self.kv.keys(match)

    async def purge(self, match: str) -> None:
        """Remove every message of the keys that `match`: nothing is left, not even a
        delete marker."""
        subject = DEFAULT_NAMES.kv_subject(self.name, match)
        await self._js.purge_stream(self._stream, subject=subject)

    async def store_blob(self, data: bytes) -> BlobRef:
        """Store `data` once under its content hash; its reference."""
        return msgspec.json.decode(await self.blobs.by_reference(data), type=BlobRef)

    async def load_blob(self, ref: BlobRef) -> bytes:
        return await self.blobs.load(ref.ref)

    async def remove_blob(self, digest: str) -> None:
        """Remove a blob: its chunks and its meta messages."""
        await self.blobs.remove(digest)
