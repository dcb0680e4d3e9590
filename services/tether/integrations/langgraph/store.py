"""The saver's reads and writes of checkpoints, values and pending writes, run on the
event loop its connection lives on (`JetStreamSaver` brings every call there)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from . import keys
from .bucket import SaverBucket
from .reads import LiveReads, Reads, Scanned
from .records import (
    EMPTY,
    KNOWN_FIELDS,
    BlobMark,
    BlobRef,
    ChannelValue,
    CheckpointRecord,
    Latest,
    PendingWrite,
    RunMark,
    Typed,
    blob_frame,
    checkpoint_decoder,
    encode,
    latest_decoder,
    unframe,
    value_decoder,
    write_decoder,
)

BATCH = 16
"""Checkpoints a listing reads at once. One that wants more reads their keys first, all
in one scan of the thread (or of every thread), a batch of keys per request."""
_ADVANCE_TRIES = 20
_MISSING = object()


def place_of(config: RunnableConfig) -> tuple[str, str]:
    """The thread and namespace a config names."""
    configurable = config["configurable"]
    return str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))


def config_of(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class CheckpointStore:
    """One saver's checkpoints in its bucket, values through `serde`; values over
    `inline_limit` bytes are blobs; stored checkpoints are read through `reads` (the
    bucket's keys one by one, unless given)."""

    def __init__(
        self,
        bucket: SaverBucket,
        serde: SerializerProtocol,
        inline_limit: int,
        reads: Reads | None = None,
    ) -> None:
        self.bucket = bucket
        self.serde = serde
        self.inline_limit = inline_limit
        self.reads = reads or LiveReads(bucket)

    # -- values ----------------------------------------------------------------
    async def dump(self, thread_id: str, value: Any) -> Typed:
        """`value` as stored: inline when small, else a blob of the thread's."""
        kind, data = self.serde.dumps_typed(value)
        if len(data) <= self.inline_limit:
            return Typed(kind, data)
        return Typed(kind, blob=await self.store_blob(thread_id, data))

    async def store_blob(self, thread_id: str, data: bytes) -> BlobRef:
        frame = blob_frame(thread_id, data)
        digest = hashlib.sha256(frame).hexdigest()
        # The mark goes first: a crash before the blob is stored leaves a mark of a blob
        # that is not there (harmless), never a blob no mark names (kept for ever).
        mark = BlobMark(size=len(frame), stored_at=datetime.now(UTC))
        await self.bucket.put(keys.blob(thread_id, digest), encode(mark))
        return await self.bucket.store_blob(frame)

    async def load(self, typed: Typed) -> Any:
        if typed.blob is not None:
            data = unframe(await self.reads.load_blob(typed.blob))
        else:
            data = typed.data or b""
        return self.serde.loads_typed((typed.type, data))

    async def load_all(self, typed: Sequence[Typed]) -> list[Any]:
        """`load` of each, the blobs at once (no task for an inline value: a listing
        loads thousands)."""
        blobs = [t for t in typed if t.blob is not None]
        read = await asyncio.gather(*map(self.load, blobs)) if blobs else []
        loaded = {id(t): value for t, value in zip(blobs, read, strict=True)}
        return [
            loaded[id(t)] if t.blob is not None else self.serde.loads_typed((t.type, t.data or b""))
            for t in typed
        ]

    # -- writing ---------------------------------------------------------------
    async def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store the values of the channels that changed, then the checkpoint, then
        move the namespace's latest pointer to it: a reader never finds a checkpoint
        whose values are not stored yet."""
        thread_id, ns = place_of(config)
        checkpoint_id = checkpoint["id"]
        meta = cast(dict[str, Any], get_serializable_checkpoint_metadata(config, metadata))
        values = checkpoint["channel_values"]
        pending = [
            self._put_value(thread_id, ns, channel, version, values.get(channel, _MISSING))
            for channel, version in new_versions.items()
        ]
        run_id = meta.get("run_id")
        if isinstance(run_id, str) and run_id:
            key = keys.run(thread_id, ns, run_id, checkpoint_id)
            pending.append(self.bucket.put(key, encode(RunMark(run_id))))
        await asyncio.gather(*pending)
        record = await self._record(thread_id, ns, config, checkpoint, meta)
        await self.bucket.put(keys.checkpoint(thread_id, ns, checkpoint_id), encode(record))
        await self.advance(thread_id, ns, checkpoint_id)
        return config_of(thread_id, ns, checkpoint_id)

    async def _put_value(
        self, thread_id: str, ns: str, channel: str, version: str | int | float, value: Any
    ) -> None:
        typed = Typed(EMPTY) if value is _MISSING else await self.dump(thread_id, value)
        record = ChannelValue(channel=channel, version=version, value=typed)
        await self.bucket.put(keys.value(thread_id, ns, channel, version), encode(record))

    async def _record(
        self,
        thread_id: str,
        ns: str,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: dict[str, Any],
    ) -> CheckpointRecord:
        extra = {k: v for k, v in checkpoint.items() if k not in KNOWN_FIELDS and v}
        return CheckpointRecord(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint["id"],
            v=checkpoint["v"],
            ts=checkpoint["ts"],
            channel_versions=dict(checkpoint["channel_versions"]),
            versions_seen={k: dict(v) for k, v in checkpoint["versions_seen"].items()},
            metadata=metadata,
            parent_checkpoint_id=get_checkpoint_id(config),
            updated_channels=checkpoint.get("updated_channels"),
            extra=Typed(*self.serde.dumps_typed(extra)) if extra else None,
        )

    async def advance(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Point the namespace's latest pointer at `checkpoint_id` unless it points at a
        newer one (ids grow with time), by compare-and-set: concurrent writers never
        move it back."""
        key = keys.latest(thread_id, ns)
        data = encode(Latest(checkpoint_id))
        for _ in range(_ADVANCE_TRIES):
            found = await self.bucket.revision(key)
            if found is not None and latest_decoder.decode(found[0]).checkpoint_id >= checkpoint_id:
                return
            if await self.bucket.swap(key, data, found[1] if found is not None else 0):
                return
        raise RuntimeError(f"the latest pointer {key!r} kept changing: gave up moving it")

    async def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """Store a task's writes. A write of a regular channel is stored once (a retry
        keeps the first); those of the special channels (error, interrupt, ...) replace
        what was there, as LangGraph's own savers do."""
        thread_id, ns = place_of(config)
        checkpoint_id = str(config["configurable"]["checkpoint_id"])

        async def one(position: int, channel: str, value: Any) -> None:
            idx = WRITES_IDX_MAP.get(channel, position)
            key = keys.write(thread_id, ns, checkpoint_id, task_id, idx)
            typed = await self.dump(thread_id, value)
            data = encode(PendingWrite(task_id, task_path, idx, channel, typed))
            if idx < 0:
                await self.bucket.put(key, data)
            else:
                await self.bucket.create(key, data)

        await asyncio.gather(*(one(i, ch, v) for i, (ch, v) in enumerate(writes)))

    # -- reading ---------------------------------------------------------------
    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the namespace's latest: one read of its
        pointer, one of the checkpoint, then its values and writes (never the history)."""
        thread_id, ns = place_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is not None:
            record = await self.record(thread_id, ns, checkpoint_id)
        else:
            record = await self._latest(thread_id, ns)
        return None if record is None else await self.tuple_of(record)

    async def record(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointRecord | None:
        [raw] = await self.reads.get_many([keys.checkpoint(thread_id, ns, checkpoint_id)])
        return None if raw is None else checkpoint_decoder.decode(raw)

    async def _latest(self, thread_id: str, ns: str) -> CheckpointRecord | None:
        raw = await self.bucket.get(keys.latest(thread_id, ns))
        if raw is not None:
            found = await self.record(thread_id, ns, latest_decoder.decode(raw).checkpoint_id)
            if found is not None:
                return found
        # No pointer, or one whose checkpoint was removed meanwhile: the newest there is.
        places = [keys.place(k) for k in await self.bucket.keys(keys.checkpoints(thread_id, ns))]
        if not places:
            return None
        return await self.record(thread_id, ns, max(p.checkpoint_id for p in places))

    async def tuple_of(self, record: CheckpointRecord) -> CheckpointTuple:
        values, writes = await asyncio.gather(self._values(record), self._writes(record))
        checkpoint: dict[str, Any] = {
            "v": record.v,
            "id": record.checkpoint_id,
            "ts": record.ts,
            "channel_values": values,
            "channel_versions": dict(record.channel_versions),
            "versions_seen": {k: dict(v) for k, v in record.versions_seen.items()},
            "updated_channels": record.updated_channels,
        }
        if record.extra is not None:
            checkpoint.update(await self.load(record.extra))
        thread_id, ns, parent = record.thread_id, record.checkpoint_ns, record.parent_checkpoint_id
        return CheckpointTuple(
            config=config_of(thread_id, ns, record.checkpoint_id),
            checkpoint=cast(Checkpoint, checkpoint),
            metadata=cast(CheckpointMetadata, record.metadata),
            parent_config=config_of(thread_id, ns, parent) if parent else None,
            pending_writes=writes,
        )

    async def _values(self, record: CheckpointRecord) -> dict[str, Any]:
        thread_id, ns = record.thread_id, record.checkpoint_ns
        wanted = [
            keys.value(thread_id, ns, channel, version)
            for channel, version in record.channel_versions.items()
        ]
        found = [value_decoder.decode(raw) for raw in await self.reads.get_many(wanted) if raw]
        stored = [item for item in found if item.value.type != EMPTY]
        loaded = await self.load_all([item.value for item in stored])
        return {item.channel: value for item, value in zip(stored, loaded, strict=True)}

    async def _writes(self, record: CheckpointRecord) -> list[tuple[str, str, Any]]:
        """The checkpoint's pending writes in `writes_sort_key` order, as LangGraph
        applies them."""
        place = (record.thread_id, record.checkpoint_ns, record.checkpoint_id)
        raws = await self.reads.get_many(await self.reads.writes_of(*place))
        found = sorted(
            (write_decoder.decode(raw) for raw in raws if raw),
            key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx),
        )
        loaded = await self.load_all([w.value for w in found])
        return [(w.task_id, w.channel, value) for w, value in zip(found, loaded, strict=True)]

    async def search(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> AsyncIterator[list[CheckpointTuple]]:
        """Checkpoints newest first, a batch at a time."""
        places = await self.places(config, before)
        wanted = len(places) if filter or limit is None else min(limit, len(places))
        store = self
        if wanted > BATCH:
            thread_id = (config or {}).get("configurable", {}).get("thread_id")
            scanned = await Scanned.of(self.bucket, None if thread_id is None else str(thread_id))
            store = CheckpointStore(self.bucket, self.serde, self.inline_limit, scanned)
        left = limit
        while places and (left is None or left > 0):
            size = BATCH if filter or left is None else min(BATCH, left)
            batch, places = places[:size], places[size:]
            raws = await store.reads.get_many([keys.checkpoint(*p) for p in batch])
            records = [checkpoint_decoder.decode(raw) for raw in raws if raw is not None]
            chosen = [r for r in records if _matches(r.metadata, filter)][:left]
            yield list(await asyncio.gather(*(store.tuple_of(r) for r in chosen)))
            left = None if left is None else left - len(chosen)

    async def places(
        self, config: RunnableConfig | None, before: RunnableConfig | None = None
    ) -> list[keys.Place]:
        """The checkpoints a listing's config and `before` select, newest first."""
        configurable = config["configurable"] if config else {}
        thread_id = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        pattern = keys.checkpoints(
            None if thread_id is None else str(thread_id), None if ns is None else str(ns)
        )
        places = [keys.place(key) for key in await self.bucket.keys(pattern)]
        if (only := configurable.get("checkpoint_id")) is not None:
            places = [p for p in places if p.checkpoint_id == only]
        if before is not None and (limit_id := get_checkpoint_id(before)) is not None:
            places = [p for p in places if p.checkpoint_id < limit_id]
        places.sort(key=lambda p: (p.checkpoint_id, p.thread_id, p.checkpoint_ns), reverse=True)
        return places


def _matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(key) == value for key, value in filter.items())
