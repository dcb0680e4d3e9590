"""Large values by reference: stored once in the Object Store under their content hash.

A value whose JSON is over the threshold is put in `<prefix>-blobs` as the object
`sha256-<hex>` and replaced by `{"$blob": "sha256:<hex>", "size": n}` in work
messages, checkpoints, records and events; tools and clients get the value back.

The store's stream refuses rollups (`provision.forbid_rollups`): nats-py's
`ObjectStore.put` sends its meta message with `Nats-Rollup: sub`, and a role that may
send that may send `all`, which purges every blob. So a blob is written here in the
Object Store's own format (chunks, then a meta message) without one, and a reader takes
its last meta message; a purge is the operator's alone (`tether gc`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.api import ObjectInfo, ObjectMetaOptions
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from tether.errors import BlobNotFoundError
from tether.nats.failures import translating
from tether.schemas.blobs import PREFIX, REF_KEY, is_ref

log = logging.getLogger("tether.nats")
OBJECT_PREFIX = "sha256-"
CHUNK_SIZE = 128 * 1024
"""nats-py's own chunk size for an Object Store."""

BLOB_GRACE = timedelta(hours=1)
"""A blob younger than this is never removed (see `tether.tasks.retention`). A writer
that finds a blob older than half of it stores it again (`Blobs.by_reference`), so a
reference written now always points at a blob the sweep leaves alone for at least half
the grace."""


def object_stream(bucket: str) -> str:
    """The stream behind an Object Store bucket."""
    return f"OBJ_{bucket}"


def _object_name(ref: str) -> str:
    return OBJECT_PREFIX + ref[len(PREFIX) :]


def stored_blob(meta: bytes) -> tuple[str, datetime] | None:
    """A blob's digest (hex) and when it was stored, from its Object Store meta message
    (None for a deleted object or another object's)."""
    try:
        info = msgspec.json.decode(meta)
    except msgspec.DecodeError:
        return None
    name = info.get("name") if isinstance(info, dict) else None
    if not isinstance(name, str) or not name.startswith(OBJECT_PREFIX) or info.get("deleted"):
        return None
    return name[len(OBJECT_PREFIX) :], _stored_at(info.get("mtime"))


def _stored_at(mtime: str | None) -> datetime:
    """When an object was stored; an unreadable time counts as now (never collected)."""
    try:
        stored = datetime.fromisoformat((mtime or "").replace("Z", "+00:00")[:26])
    except ValueError:
        return datetime.now(UTC)
    return stored if stored.tzinfo else stored.replace(tzinfo=UTC)


@translating
class Blobs:
    """The blob store of one Tether prefix; `threshold` in bytes of JSON."""

    def __init__(
        self, js: JetStreamContext, store: ObjectStore, bucket: str, threshold: int
    ) -> None:
        self._js = js
        self._store = store
        self._bucket = bucket
        self.threshold = threshold

    async def by_reference(self, data: bytes) -> bytes:
        """`data` (JSON) as it travels: itself when small, else a reference to it."""
        if len(data) <= self.threshold:
            return data
        ref = PREFIX + hashlib.sha256(data).hexdigest()
        name = _object_name(ref)
        try:
            info = await self._store.get_info(name)  # the same content is stored once
        except ObjectNotFoundError:
            info = None
        if info is None:
            await self._put(name, data)
        elif _stored_at(info.mtime) < _now() - BLOB_GRACE / 2:
            await self._touch(info)  # see `BLOB_GRACE`
        return msgspec.json.encode({REF_KEY: ref, "size": len(data)})

    async def _put(self, name: str, data: bytes) -> None:
        """Store an object as `ObjectStore.put` does, but with no rollup (see above):
        its chunks under a subject of their own, then its meta message."""
        nuid = uuid.uuid4().hex
        chunks = f"$O.{self._bucket}.C.{nuid}"
        for start in range(0, len(data), CHUNK_SIZE):
            await self._js.publish(chunks, data[start : start + CHUNK_SIZE])
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
        info = ObjectInfo(
            name=name,
            bucket=self._bucket,
            nuid=nuid,
            size=len(data),
            chunks=-(-len(data) // CHUNK_SIZE),
            digest=f"SHA-256={digest}",
            options=ObjectMetaOptions(max_chunk_size=CHUNK_SIZE),
        )
        await self._touch(info)

    async def _touch(self, info: ObjectInfo) -> None:
        """Store a blob's meta message (again), with a new time: its chunks stay. Each is
        kept until the operator removes the blob; a reader takes the last."""
        info.mtime = _now().isoformat()
        await self._js.publish(self._meta_subject(info.name), json.dumps(info.as_dict()).encode())

    def _meta_subject(self, name: str) -> str:
        return f"$O.{self._bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"

    async def stored_at(self, ref: str) -> datetime | None:
        """When the blob was stored (or last stored again); None when it is not there."""
        try:
            info = await self._store.get_info(_object_name(ref))
        except ObjectNotFoundError:
            return None
        return _stored_at(info.mtime)

    async def raw_by_reference(self, output: Any) -> Any:
        """An encoded output (`msgspec.Raw`) as it travels; anything else as it is."""
        if not isinstance(output, msgspec.Raw) or len(output) <= self.threshold:
            return output
        return msgspec.Raw(await self.by_reference(bytes(output)))

    async def load(self, ref: str) -> bytes:
        """The blob's bytes, read chunk by chunk with bounded requests: nats-py's
        `ObjectStore.get` waits for ever on a subscription when the chunks it was told of
        are gone (an object stored again, or removed, between its two reads)."""
        for _ in range(2):  # a second look when the object changed while it was read
            try:
                info = await self._store.get_info(_object_name(ref))
            except ObjectNotFoundError:
                break
            data = await self._chunks(info.nuid or "", info.chunks or 0)
            if data is not None and _matches(data, info.digest or ""):
                # The name is the content's hash: a blob someone stored under another's
                # name is refused, so writing blobs cannot change what a reference means.
                if hashlib.sha256(data).hexdigest() == ref.removeprefix(PREFIX):
                    return data
                log.warning("blob %s does not hash to its name: refused", ref)
                break
        raise BlobNotFoundError(ref)

    async def _chunks(self, nuid: str, count: int) -> bytes | None:
        """The `count` chunks stored under `nuid`, or None when they are gone."""
        subject, stream = f"$O.{self._bucket}.C.{nuid}", object_stream(self._bucket)
        data, seq = bytearray(), 0
        try:
            for _ in range(count):
                msg = await self._js.get_msg(stream, seq=seq + 1, subject=subject, next=True)
                data += msg.data or b""
                seq = msg.seq or seq + 1
        except NotFoundError:
            return None
        return bytes(data)

    async def remove(self, digest: str) -> None:
        """Purge a blob's chunks and meta messages (an operator's right, as every purge)."""
        name, stream = OBJECT_PREFIX + digest, object_stream(self._bucket)
        try:
            info = await self._store.get_info(name)
        except ObjectNotFoundError:
            return
        await self._js.purge_stream(stream, subject=f"$O.{self._bucket}.C.{info.nuid}")
        await self._js.purge_stream(stream, subject=self._meta_subject(name))

    async def resolve(self, value: Any) -> Any:
        """`value` with references replaced by what they name: the value itself, or the
        items of a list (a parallel step's outputs). Deeper references stay as they are."""
        if is_ref(value):
            return msgspec.json.decode(await self.load(value[REF_KEY]))
        if isinstance(value, list) and any(is_ref(item) for item in value):
            return [await self.resolve(item) if is_ref(item) else item for item in value]
        return value


def _matches(data: bytes, digest: str) -> bool:
    """Whether `data` has the digest an Object Store meta names (`SHA-256=<base64url>`)."""
    kind, _, encoded = digest.partition("=")
    return (
        kind.upper() == "SHA-256"
        and base64.urlsafe_b64decode(encoded + "==") == hashlib.sha256(data).digest()
    )


def _now() -> datetime:
    return datetime.now(UTC)
