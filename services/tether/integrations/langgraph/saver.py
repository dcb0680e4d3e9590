"""`JetStreamSaver`: a LangGraph checkpointer on NATS JetStream, sync and async.

Layout, readable by any NATS client (keys as `keys` builds them; values JSON as
`records` defines them):

- A KV bucket per saver, `langgraph` unless named (stream `KV_<bucket>`, one value per
  key), and an Object Store bucket `<bucket>-blobs` for values too large to keep inline.
- Every key is `<thread>.<kind>.…`, each id one token: letters, digits, `_` and `-` as
  they are, any other UTF-8 byte as `=XX`, the empty string as `=` (`child:1` is
  `child=3A1`; the root namespace is `=`).

  - `<thread>.l.<ns>`: `{"checkpoint_id"}`, the namespace's newest checkpoint.
  - `<thread>.c.<ns>.<checkpoint_id>`: the checkpoint without its channel values, as
    plain JSON: its ids and `parent_checkpoint_id`, `v`, `ts`, `channel_versions`,
    `versions_seen`, `updated_channels` and `metadata`.
  - `<thread>.v.<ns>.<channel>.<version>`: `{"channel", "version", "value"}`, one
    version of a channel's value, shared by every checkpoint that has that version.
  - `<thread>.w.<ns>.<checkpoint_id>.<task_id>.<idx>`: `{"task_id", "task_path", "idx",
    "channel", "value"}`, a pending write (idx < 0: error, interrupt, resume, ...).
  - `<thread>.r.<ns>.<run_id>.<checkpoint_id>`: `{"run_id"}`, the run that made it.
  - `<thread>.b.<sha256 hex>`: `{"size", "stored_at"}`, a blob the thread stored.

- A `value` is what the saver's `serde` (LangGraph's `JsonPlusSerializer` unless
  given) made of it: `{"type": <its type tag>, "data": <base64>}`, or, over
  `inline_limit` bytes, `{"type": …, "blob": {"$blob": "sha256:<hex>", "size": n}}`:
  the object `sha256-<hex>` of `<bucket>-blobs` holds the thread id as a JSON string,
  a newline, then the bytes. Type `empty` is a channel with a new version and no value.

What grows is the threads' own checkpoints and nothing else: no index spans threads,
and `delete_thread` removes a thread's blobs and then all its keys in one purge
(`prune` and `delete_for_runs` remove what no checkpoint left needs; a blob, once it
is five minutes old). Reading a namespace's latest checkpoint is one read of its `l`
key, one of the checkpoint, one per channel it holds, one listing of its writes and one
read per write, however long the thread's history. A listing of more checkpoints than
a batch (16) reads every key of the thread (of every thread, for `config` None) in one
scan, a thousand keys per request, and each blob once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from tether.nats.connection import Connection, NatsConfig, close, connect

from . import upkeep
from .bucket import SaverBucket, create_buckets
from .loops import Home
from .store import CheckpointStore

T = TypeVar("T")
DEFAULT_BUCKET = "langgraph"
DEFAULT_INLINE_LIMIT = 128 * 1024
"""Serialized values larger than this (bytes) are stored as blobs, not inline: a KV
value must fit in one NATS message, base64 and all."""
_BUCKET_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")


class _Link:
    """The connection and bucket a saver shares with its clones (LangGraph clones a
    saver for each compiled graph: `with_allowlist`), opened once, on the home loop."""

    def __init__(self, home: Home, nc: Connection | None, config: NatsConfig | None) -> None:
        self.home = home
        self.nc = nc
        self.config = config
        self.owned = nc is None
        self.bucket: SaverBucket | None = None
        self._lock: asyncio.Lock | None = None

    async def connection(self) -> Connection:
        if self.nc is None:
            assert self.config is not None
            self.nc = await connect(self.config)
        return self.nc

    async def opened(self, name: str) -> SaverBucket:
        if self.bucket is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self.bucket is None:
                    bucket = SaverBucket(await self.connection(), name)
                    await bucket.open()
                    self.bucket = bucket
        return self.bucket

    async def close(self) -> None:
        nc, self.nc, self.bucket = self.nc, None, None
        if self.owned and nc is not None:
            await close(nc)


class JetStreamSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps checkpoints in a NATS JetStream KV bucket.

    ```python
    with JetStreamSaver.from_conn_string("nats://127.0.0.1:4222") as saver:
        saver.setup()  # once: creates the bucket and its blob store
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "1"}})
    ```

    Args:
        conn: A NATS URL or `NatsConfig` (the saver connects, on a loop of its own, and
            `close()` disconnects), or an open connection (used as it is, on its loop;
            sync calls then need that loop running in another thread).
        bucket: The KV bucket (letters, digits, `_`, `-`); blobs go to `<bucket>-blobs`.
        serde: How values are serialized; LangGraph's `JsonPlusSerializer` by default.
        inline_limit: Serialized values over this many bytes are stored as blobs.
        replicas: Replicas of the buckets `setup()` creates (3 on a JetStream cluster).
    """

    def __init__(
        self,
        conn: Connection | NatsConfig | str,
        *,
        bucket: str = DEFAULT_BUCKET,
        serde: SerializerProtocol | None = None,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        replicas: int = 1,
    ) -> None:
        super().__init__(serde=serde)
        if not _BUCKET_NAME.fullmatch(bucket):
            raise ValueError(
                f"bucket {bucket!r} is not a valid JetStream bucket name: use letters, "
                "digits, '_' and '-'"
            )
        self.bucket = bucket
        self.inline_limit = inline_limit
        self.replicas = replicas
        if isinstance(conn, str | NatsConfig):
            config = NatsConfig(url=conn) if isinstance(conn, str) else conn
            self._link = _Link(Home.private(f"JetStreamSaver-{bucket}"), None, config)
        else:
            self._link = _Link(Home(), conn, None)
            with contextlib.suppress(RuntimeError):  # created outside a loop: the first call's
                self._link.home.adopt()

    @classmethod
    def from_conn_string(
        cls,
        url: str | NatsConfig,
        *,
        bucket: str = DEFAULT_BUCKET,
        serde: SerializerProtocol | None = None,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        replicas: int = 1,
    ) -> SaverContext:
        """A saver connected to `url` for a `with` block (its own loop, so sync calls
        work anywhere) or an `async with` block (a connection on the running loop)."""

        def make(conn: Connection | NatsConfig) -> JetStreamSaver:
            return cls(
                conn, bucket=bucket, serde=serde, inline_limit=inline_limit, replicas=replicas
            )

        return SaverContext(NatsConfig(url=url) if isinstance(url, str) else url, make)

    # -- lifecycle -------------------------------------------------------------
    async def _setup(self) -> None:
        await create_buckets(await self._link.connection(), self.bucket, self.replicas)
        await self._link.opened(self.bucket)

    def setup(self) -> None:
        """Create the bucket and its blob store (idempotent). Call once, before use."""
        self._link.home.wait(self._setup)

    async def asetup(self) -> None:
        """`setup`, async."""
        await self._link.home.run(self._setup)

    def close(self) -> None:
        """Disconnect a connection the saver opened, and stop its loop."""
        if self._link.owned and self._link.nc is not None:
            self._link.home.wait(self._link.close)
        self._link.home.close()

    async def aclose(self) -> None:
        """`close`, async."""
        await self._link.home.run(self._link.close)
        self._link.home.close()

    # -- the checkpointer ------------------------------------------------------
    async def _on_home(self, op: Callable[[CheckpointStore], Awaitable[T]]) -> T:
        bucket = await self._link.opened(self.bucket)
        return await op(CheckpointStore(bucket, self.serde, self.inline_limit))

    async def _run(self, op: Callable[[CheckpointStore], Awaitable[T]]) -> T:
        return await self._link.home.run(lambda: self._on_home(op))

    def _wait(self, op: Callable[[CheckpointStore], Awaitable[T]]) -> T:
        return self._link.home.wait(lambda: self._on_home(op))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names (its `checkpoint_id`), or the thread's latest."""
        return await self._run(lambda store: store.get_tuple(config))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._wait(lambda store: store.get_tuple(config))

    async def _listing(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> AsyncGenerator[list[CheckpointTuple], None]:
        """A listing's checkpoints a batch at a time: one hop between loops per batch."""
        bucket = await self._link.opened(self.bucket)
        store = CheckpointStore(bucket, self.serde, self.inline_limit)
        async for batch in store.search(config, filter, before, limit):
            yield batch

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first: of a thread (and namespace, when the config names
        one), or of every thread (`config` None); `filter` matches metadata keys."""
        listing = self._link.home.stream(lambda: self._listing(config, filter, before, limit))
        async for batch in listing:
            for found in batch:
                yield found

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        listing = self._link.home.iterate(lambda: self._listing(config, filter, before, limit))
        return (found for batch in listing for found in batch)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in `new_versions`."""
        return await self._run(lambda store: store.put(config, checkpoint, metadata, new_versions))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._wait(lambda store: store.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes against the checkpoint `config` names."""
        await self._run(lambda store: store.put_writes(config, writes, task_id, task_path))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._wait(lambda store: store.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Remove the thread: every key and blob of it."""
        await self._run(lambda store: upkeep.delete_thread(store, str(thread_id)))

    def delete_thread(self, thread_id: str) -> None:
        self._wait(lambda store: upkeep.delete_thread(store, str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) that these runs made."""
        await self._run(lambda store: upkeep.delete_for_runs(store, [str(r) for r in run_ids]))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._wait(lambda store: upkeep.delete_for_runs(store, [str(r) for r in run_ids]))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread to another."""
        source, target = str(source_thread_id), str(target_thread_id)
        await self._run(lambda store: upkeep.copy_thread(store, source, target))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        self._wait(lambda store: upkeep.copy_thread(store, source, target))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's newest checkpoint (and the ancestors a
        `DeltaChannel` needs to be rebuilt); `delete`: remove the threads."""
        threads = [str(t) for t in thread_ids]
        await self._run(lambda store: upkeep.prune(store, threads, strategy))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        threads = [str(t) for t in thread_ids]
        self._wait(lambda store: upkeep.prune(store, threads, strategy))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """`<n, 32 digits>.<random>`, as LangGraph's own savers make them: the random
        part keeps two forks of one checkpoint from writing the same version key."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"


class SaverContext:
    """What `JetStreamSaver.from_conn_string` returns: a `with` or `async with` block."""

    def __init__(
        self, config: NatsConfig, make: Callable[[Connection | NatsConfig], JetStreamSaver]
    ) -> None:
        self._config = config
        self._make = make
        self._saver: JetStreamSaver | None = None

    def __enter__(self) -> JetStreamSaver:
        self._saver = self._make(self._config)
        return self._saver

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._saver is not None:
            self._saver.close()

    async def __aenter__(self) -> JetStreamSaver:
        nc = await connect(self._config)
        saver = self._saver = self._make(nc)
        saver._link.owned = True  # opened here, closed by `__aexit__`
        return saver

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._saver is not None:
            await self._saver.aclose()
