"""Removing and copying threads: `delete_thread`, `prune`, `delete_for_runs`,
`copy_thread`. What a thread keeps is its checkpoints, the values they name, their
writes, and the blobs those refer to; each operation leaves exactly that."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from datetime import UTC, datetime, timedelta

import msgspec

from . import keys
from .records import (
    EMPTY,
    ChannelValue,
    CheckpointRecord,
    Latest,
    Typed,
    checkpoint_decoder,
    encode,
    latest_decoder,
    mark_decoder,
    referenced,
    unframe,
    value_decoder,
    write_decoder,
)
from .store import CheckpointStore

SETTLE = timedelta(minutes=5)
"""A blob nothing refers to is removed by `prune` and `delete_for_runs` only once its
mark is this old: a writer stores a blob before the value that refers to it."""
CONCURRENCY = 64
"""Requests in flight at once while a thread is copied or cleaned."""
STRATEGIES = ("keep_latest", "delete")
DELTA_COUNTERS = "counters_since_delta_snapshot"


async def _in_batches(calls: Iterable[Awaitable[object]]) -> None:
    pending = list(calls)
    for start in range(0, len(pending), CONCURRENCY):
        await asyncio.gather(*pending[start : start + CONCURRENCY])


async def delete_thread(store: CheckpointStore, thread_id: str) -> None:
    """Remove the thread's blobs, then every key of the thread in one purge (a cut-off
    delete leaves the marks, so doing it again finishes it)."""
    bucket = store.bucket
    marks = await bucket.keys(keys.blobs(thread_id))
    await _in_batches(bucket.remove_blob(key.rsplit(".", 1)[1]) for key in marks)
    await bucket.purge(keys.thread_keys(thread_id))


async def prune(store: CheckpointStore, thread_ids: Sequence[str], strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
    for thread_id in thread_ids:
        if strategy == "delete":
            await delete_thread(store, thread_id)
        else:
            await _keep_latest(store, str(thread_id))


async def _keep_latest(store: CheckpointStore, thread_id: str) -> None:
    """Keep each namespace's newest checkpoint and what it needs: the ancestors back to
    a stored value of every channel it holds none of (a `DeltaChannel` between its
    snapshots is rebuilt from the writes of those ancestors)."""
    places = await store.places({"configurable": {"thread_id": thread_id}})
    newest: dict[str, str] = {}
    for place in places:
        newest.setdefault(place.checkpoint_ns, place.checkpoint_id)  # newest first
    kept: set[tuple[str, str]] = set()
    for ns, checkpoint_id in newest.items():
        kept |= {(ns, cid) for cid in await _needed(store, thread_id, ns, checkpoint_id)}
    await _drop(store, [p for p in places if (p.checkpoint_ns, p.checkpoint_id) not in kept])
    await _collect(store, thread_id)


async def _needed(store: CheckpointStore, thread_id: str, ns: str, checkpoint_id: str) -> list[str]:
    """`checkpoint_id` and the ancestors its delta channels need: back to one that
    stored a value (a snapshot) of each. LangGraph names a checkpoint's delta channels
    in its metadata (`counters_since_delta_snapshot`)."""
    needed: list[str] = []
    record = await store.record(thread_id, ns, checkpoint_id)
    missing: set[str] | None = None
    while record is not None:
        needed.append(record.checkpoint_id)
        if missing is None:
            missing = set(record.metadata.get(DELTA_COUNTERS) or ()) & set(record.channel_versions)
        if missing:
            missing -= await _held(store, record)
        if not missing or record.parent_checkpoint_id is None:
            break
        record = await store.record(thread_id, ns, record.parent_checkpoint_id)
    return needed


async def _held(store: CheckpointStore, record: CheckpointRecord) -> set[str]:
    """The channels `record` has a stored value of."""
    wanted = [
        keys.value(record.thread_id, record.checkpoint_ns, channel, version)
        for channel, version in record.channel_versions.items()
    ]
    found = [value_decoder.decode(raw) for raw in await store.bucket.get_many(wanted) if raw]
    return {item.channel for item in found if item.value.type != EMPTY}


async def delete_for_runs(store: CheckpointStore, run_ids: Sequence[str]) -> None:
    """Remove the checkpoints the runs made (found by their run keys), with their writes;
    then repoint and clean each thread they were in."""
    dropped: list[keys.Place] = []
    for run_id in run_ids:
        dropped += [keys.place(key) for key in await store.bucket.keys(keys.run_keys(run_id))]
    await _drop(store, dropped)
    for thread_id, ns in {(p.thread_id, p.checkpoint_ns) for p in dropped}:
        await _repoint(store, thread_id, ns)
    for thread_id in {p.thread_id for p in dropped}:
        await _collect(store, thread_id)


async def _drop(store: CheckpointStore, places: Sequence[keys.Place]) -> None:
    """Remove checkpoints with their writes and run keys (their values: `_collect`)."""
    bucket = store.bucket
    await _in_batches(
        bucket.purge(pattern)
        for p in places
        for pattern in (
            keys.checkpoint(*p),
            keys.writes_of(*p),
            keys.runs_of(*p),
        )
    )


async def _repoint(store: CheckpointStore, thread_id: str, ns: str) -> None:
    """Point the namespace's latest pointer at its newest checkpoint left, or remove it."""
    places = await store.places({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
    key = keys.latest(thread_id, ns)
    if places:
        await store.bucket.put(key, encode(Latest(places[0].checkpoint_id)))
    else:
        await store.bucket.purge(key)


async def _collect(store: CheckpointStore, thread_id: str) -> None:
    """Remove the values no checkpoint of the thread names, then the blobs nothing left
    refers to (once settled: see `SETTLE`)."""
    bucket = store.bucket
    records = await _records(store, await bucket.keys(keys.checkpoints(thread_id, None)))
    live = {
        keys.value(thread_id, r.checkpoint_ns, channel, version)
        for r in records
        for channel, version in r.channel_versions.items()
    }
    stored = set(await bucket.keys(keys.values(thread_id)))
    await _in_batches(bucket.purge(key) for key in stored - live)
    marks = await bucket.keys(keys.blobs(thread_id))
    if not marks:
        return
    used = await _blobs_used(store, thread_id, sorted(stored & live))
    settled = datetime.now(UTC) - SETTLE
    for key, raw in zip(marks, await bucket.get_many(marks), strict=True):
        digest = key.rsplit(".", 1)[1]
        if digest in used or (raw is not None and mark_decoder.decode(raw).stored_at > settled):
            continue
        await bucket.remove_blob(digest)
        await bucket.purge(key)


async def _records(store: CheckpointStore, found: Sequence[str]) -> list[CheckpointRecord]:
    return [checkpoint_decoder.decode(raw) for raw in await store.bucket.get_many(found) if raw]


async def _blobs_used(store: CheckpointStore, thread_id: str, value_keys: list[str]) -> set[str]:
    """The digests the thread's remaining values and writes refer to."""
    bucket = store.bucket
    write_keys = await bucket.keys(keys.writes(thread_id))
    used: set[str] = set()
    for raw in await bucket.get_many(value_keys):
        if raw and (digest := referenced(value_decoder.decode(raw).value)):
            used.add(digest)
    for raw in await bucket.get_many(write_keys):
        if raw and (digest := referenced(write_decoder.decode(raw).value)):
            used.add(digest)
    return used


async def copy_thread(store: CheckpointStore, source: str, target: str) -> None:
    """Copy every checkpoint of `source`, with its values, writes and run keys, to
    `target`: its blobs are stored again as the target's own. Data first, checkpoints
    next, latest pointers last, so a reader of `target` never finds half a checkpoint."""
    found = await store.bucket.keys(keys.thread_keys(source))
    by_kind: dict[str, list[str]] = {}
    for key in found:
        by_kind.setdefault(key.split(".")[1], []).append(key)

    async def copy(key: str) -> None:
        raw = await store.bucket.get(key)
        if raw is not None:
            data = await _retargeted(store, key.split(".")[1], raw, target)
            await store.bucket.put(keys.retarget(key, source, target), data)

    for kinds in ((keys.VALUE, keys.WRITE, keys.RUN), (keys.CHECKPOINT,)):
        await _in_batches(copy(key) for kind in kinds for key in by_kind.get(kind, []))
    for key in by_kind.get(keys.LATEST, []):
        raw = await store.bucket.get(key)
        if raw is not None:
            ns = keys.unescape(key.split(".")[2])
            await store.advance(target, ns, latest_decoder.decode(raw).checkpoint_id)


async def _retargeted(store: CheckpointStore, kind: str, raw: bytes, target: str) -> bytes:
    """A stored record as `target`'s copy of it."""
    if kind == keys.CHECKPOINT:
        return encode(msgspec.structs.replace(checkpoint_decoder.decode(raw), thread_id=target))
    if kind == keys.VALUE:
        item = value_decoder.decode(raw)
        value = await _rehomed(store, item.value, target)
        return encode(ChannelValue(item.channel, item.version, value))
    if kind == keys.WRITE:
        write = write_decoder.decode(raw)
        value = await _rehomed(store, write.value, target)
        return encode(msgspec.structs.replace(write, value=value))
    return raw


async def _rehomed(store: CheckpointStore, value: Typed, target: str) -> Typed:
    """`value`, its blob (if any) stored again as a blob of `target`."""
    if value.blob is None:
        return value
    data = unframe(await store.bucket.load_blob(value.blob))
    return Typed(value.type, blob=await store.store_blob(target, data))
