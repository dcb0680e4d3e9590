"""Idempotent creation of Tether's streams, buckets and per-tool consumers, and the stamp
that lets a process whose NATS user may not create them start without trying."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import Enum
from typing import Any, TypeVar

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    PersistMode,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError

from tether.errors import NotProvisionedError
from tether.nats.connection import NatsConfig, refusals
from tether.schemas.names import DEFAULT_NAMES, Names

# NATS error codes (never match on description text).
STREAM_NAME_IN_USE = 10058
log = logging.getLogger("tether.nats")
T = TypeVar("T")


@dataclass(frozen=True)
class Layout:
    """Retention and replication of Tether's JetStream objects."""

    names: Names = field(default_factory=lambda: DEFAULT_NAMES)
    replicas: int = 1
    """3 on a JetStream cluster."""
    duplicate_window: timedelta = timedelta(minutes=2)
    """How long a step's `Nats-Msg-Id` is remembered; must outlast a redelivery."""
    status_max_age: timedelta = timedelta(days=7)
    status_per_task: int = 10_000
    dead_letter_max_age: timedelta = timedelta(days=30)
    heartbeat_ttl: timedelta = timedelta(hours=1)
    """How long a step's heartbeat key stays after its last write. A held step writes it
    once (and on progress), so this bounds the longest step that shows one."""
    index_tasks: bool = True
    """Keep the status index that makes a filtered list's first page fast (three core
    publishes per task as its status changes); off, listing reads every record."""
    tokens_max_age: timedelta = timedelta(hours=1)
    """How long streamed text stays to follow (or resume) after it was written."""
    blob_threshold: int = 256 * 1024
    """Outputs (and submitted inputs) whose JSON is larger go to `tether-blobs`, once,
    under their content hash, and travel as `{"$blob": "sha256:…", "size": n}`. Below
    this, carrying a value inline is cheaper than an Object Store put and get."""

    @classmethod
    def for_config(cls, config: NatsConfig) -> Layout:
        return cls(names=config.names, replicas=config.replicas)


@dataclass(frozen=True)
class ConsumerOptions:
    """A tool's consumer; `max_ack_pending` is the tool's global concurrency limit."""

    ack_wait: timedelta = timedelta(seconds=5)
    max_ack_pending: int = 1000


def _seconds(value: timedelta) -> float:
    return value.total_seconds()


LAYOUT_VERSION = 1
"""The version of the installation's shape (streams, buckets and their settings) this
Tether provisions; raise it whenever that shape changes. A Tether that finds a higher one
leaves the installation as it is."""
STAMP = "tether.layout"
DIGEST = "tether.layout.digest"
"""Keys of the work stream's metadata (nats-server 2.10+) with which `provision` stamps an
installation, last: the layout version, and a digest of every setting it applied."""
REFUSED = "$JS.API.STREAM."
"""Requests a user who may not provision is refused (creating or updating a stream)."""


class _Refused(Exception):
    """The server refused (or never answered) a request to create or update a stream."""


def _streams(layout: Layout) -> list[StreamConfig]:
    names = layout.names
    streams = [
        StreamConfig(
            name=names.submit_stream,
            subjects=[names.submit_subject],
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=_seconds(layout.duplicate_window),
        ),
        StreamConfig(
            name=names.status_stream,
            subjects=[names.status_subjects],
            retention=RetentionPolicy.LIMITS,
            max_age=_seconds(layout.status_max_age),
            max_msgs_per_subject=layout.status_per_task,
            discard=DiscardPolicy.OLD,
        ),
        StreamConfig(
            name=names.dead_letter_stream,
            subjects=[names.dead_letter_subjects],
            retention=RetentionPolicy.LIMITS,
            max_age=_seconds(layout.dead_letter_max_age),
        ),
        StreamConfig(
            name=names.index_stream,
            subjects=[names.index_subjects],
            retention=RetentionPolicy.LIMITS,
            max_msgs_per_subject=1,
            discard=DiscardPolicy.OLD,
            allow_rollup_hdrs=True,
            allow_msg_ttl=True,  # a row a task left expires (see `Store.index`)
        ),
        StreamConfig(
            name=names.tokens_stream,
            subjects=[names.tokens_subjects],
            retention=RetentionPolicy.LIMITS,
            max_age=_seconds(layout.tokens_max_age),
            discard=DiscardPolicy.OLD,
            # Tokens are a live view of a step whose result is checkpointed anyway:
            # batching their writes to disk is worth the last second on a server crash.
            persist_mode=PersistMode.ASYNC,
        ),
    ]
    for config in streams:
        config.num_replicas = layout.replicas
        config.storage = StorageType.FILE
    return streams


def _work_stream(layout: Layout, stamped: bool = True) -> StreamConfig:
    """The work stream, which carries the installation's stamp (so it is written last)."""
    names = layout.names
    config = StreamConfig(
        name=names.work_stream,
        subjects=[names.work_subjects, names.timer_subjects],
        retention=RetentionPolicy.WORK_QUEUE,
        duplicate_window=_seconds(layout.duplicate_window),
        allow_msg_schedules=True,  # durable sleep (nats-server 2.12+)
        num_replicas=layout.replicas,
        storage=StorageType.FILE,
    )
    if stamped:
        config.metadata = {STAMP: str(LAYOUT_VERSION), DIGEST: layout_digest(layout)}
    return config


def _buckets(layout: Layout) -> list[KeyValueConfig]:
    names = layout.names
    return [
        # Direct gets are one request instead of a JSON API call, but on a cluster any
        # replica may answer them, possibly before it has applied the latest write; the
        # protocol reads its own writes, so replicated buckets read from the leader.
        KeyValueConfig(
            bucket=bucket,
            history=1,
            ttl=ttl,
            replicas=layout.replicas,
            storage=StorageType.FILE,
            direct=layout.replicas == 1,
        )
        for bucket, ttl in (
            (names.tasks_bucket, None),
            (names.checkpoints_bucket, None),
            (names.tools_bucket, None),
            (names.heartbeats_bucket, _seconds(layout.heartbeat_ttl)),
            (names.workers_bucket, None),
        )
    ]


def layout_digest(layout: Layout) -> str:
    """A digest of every setting `provision` applies for `layout`, replicas aside (they
    are compared as they are: a process never lowers them)."""
    single = replace(layout, replicas=1)
    configs = [*_streams(single), _work_stream(single, stamped=False), *_buckets(single)]
    settings = [config.as_dict() for config in configs]
    settings.append(ObjectStoreConfig(bucket=layout.names.blobs_bucket).as_dict())
    data = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


async def provision(js: JetStreamContext, layout: Layout = Layout()) -> None:
    """Create (or update) every stream, bucket and store Tether needs, then stamp the
    installation with its layout; safe to call from every process. Raises
    NotProvisionedError at the first refusal when this NATS user may not create streams."""
    try:
        await _provision(js, layout)
    except _Refused as exc:
        raise NotProvisionedError(layout.names.prefix, [], refused=str(exc)) from None


async def _provision(js: JetStreamContext, layout: Layout) -> None:
    for config in _streams(layout):
        await _ensure_stream(js, config)
    for bucket in _buckets(layout):
        await _unless_refused(js, _ensure_bucket(js, bucket), f"create bucket {bucket.bucket}")
    store = ObjectStoreConfig(replicas=layout.replicas, storage=StorageType.FILE)
    blobs = layout.names.blobs_bucket
    await _unless_refused(
        js, _ensure_object_store(js, blobs, store), f"create object store {blobs}"
    )
    await _ensure_stream(js, _work_stream(layout))  # the stamp: everything else is there


async def _ensure_object_store(
    js: JetStreamContext, bucket: str, config: ObjectStoreConfig
) -> None:
    try:
        await js.create_object_store(bucket, config=config)
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise


async def open_installation(js: JetStreamContext, layout: Layout, create: bool) -> None:
    """Make sure the installation under `layout.names` is there before a process binds to
    it, or raise NotProvisionedError naming what is missing.

    With `create`, also bring it up to date: nothing to do when its stamp says this
    layout was provisioned (one request), else provision it. A NATS user who may not
    create streams (see deploy/nats/roles.conf) is refused that at once; the process
    then goes on if nothing is missing, and says to run `tether provision` if something
    is. An installation stamped by a newer Tether is left as it is.
    """
    refused = None
    if create:
        stamp = await _stamp(js, layout)
        if stamp is _Stamp.CURRENT:
            return
        if stamp is _Stamp.OLDER:
            refused = await _provision_unless_refused(js, layout)
            if refused is None:
                return
    if absent := await missing(js, layout.names):
        raise NotProvisionedError(layout.names.prefix, absent, refused=refused)
    if refused is not None:
        log.warning(
            "the Tether installation under prefix %r was not provisioned with this "
            "process's layout (version %d, %s) and this NATS user may not update it (%s): "
            "run 'tether provision' as an operator",
            layout.names.prefix,
            LAYOUT_VERSION,
            layout_digest(layout),
            refused,
        )


class _Stamp(Enum):
    CURRENT = "current"
    """`provision` applied this layout, at its replicas or more."""
    OLDER = "older"
    """Never provisioned, by an older Tether, or with other settings."""
    NEWER = "newer"


async def _stamp(js: JetStreamContext, layout: Layout) -> _Stamp:
    try:
        info = await js.stream_info(layout.names.work_stream)
    except NotFoundError:
        return _Stamp.OLDER
    config = info.config
    metadata = config.metadata or {}
    version = metadata.get(STAMP, "0")
    version_number = int(version) if version.isdigit() else 0
    if version_number > LAYOUT_VERSION:
        return _Stamp.NEWER
    current = (
        version_number == LAYOUT_VERSION
        and metadata.get(DIGEST) == layout_digest(layout)
        and (config.num_replicas or 1) >= layout.replicas
    )
    return _Stamp.CURRENT if current else _Stamp.OLDER


async def _provision_unless_refused(js: JetStreamContext, layout: Layout) -> str | None:
    """Provision; the server's refusal instead when this user may not. A request left
    unanswered counts as refused too: on a connection not made by `connect`, that is
    how a refusal shows."""
    try:
        await _provision(js, layout)
    except _Refused as exc:
        return str(exc)
    except NatsTimeoutError:
        return "no answer to a request to create or update a stream"
    return None


async def _unless_refused(js: JetStreamContext, call: Awaitable[T], what: str) -> T:
    """`call`, or _Refused (saying it was not allowed to do `what`) as soon as the server
    refuses a stream request on this connection: nats-py itself would wait for its
    timeout, on every stream."""
    watching = refusals(js._nc)
    refusal = watching.next(REFUSED) if watching is not None else None
    task = asyncio.ensure_future(call)
    try:
        if refusal is not None:
            either: set[asyncio.Future[Any]] = {task, refusal}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                raise _Refused(f"not allowed to {what}")
        return await task
    finally:
        task.cancel()
        if refusal is not None:
            refusal.cancel()


def expected_streams(names: Names) -> list[str]:
    """Every stream Tether's installation under `names` has (buckets and store included)."""
    buckets = [names.tasks_bucket, names.checkpoints_bucket, names.tools_bucket]
    buckets += [names.heartbeats_bucket, names.workers_bucket]
    streams = [names.submit_stream, names.work_stream, names.status_stream]
    streams += [names.dead_letter_stream, names.index_stream, names.tokens_stream]
    return [*streams, *(names.kv_stream(b) for b in buckets), f"OBJ_{names.blobs_bucket}"]


async def missing(js: JetStreamContext, names: Names) -> list[str]:
    """The streams of the installation under `names` that are not there (all of them when
    nothing lives under that prefix)."""
    absent = []
    for stream in expected_streams(names):
        try:
            await js.stream_info(stream)
        except NotFoundError:
            absent.append(stream)
    return absent


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    """Create the stream, or update what Tether owns of an existing one.

    Never lowers its replicas: a client started without `--replicas` must not turn a
    cluster's R3 stream into R1.
    """
    try:
        await _unless_refused(
            js, js.add_stream(_replicable(config)), f"create stream {config.name}"
        )
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
        assert config.name is not None
        current = (await js.stream_info(config.name)).config
        config.num_replicas = max(config.num_replicas or 1, current.num_replicas or 1)
        await _unless_refused(
            js, js.update_stream(_replicable(config)), f"update stream {config.name}"
        )


def _replicable(config: StreamConfig) -> StreamConfig:
    """nats-server persists replicated streams synchronously only: drop `async` there."""
    if (config.num_replicas or 1) > 1 and config.persist_mode is PersistMode.ASYNC:
        config.persist_mode = None
    return config


async def _ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> None:
    try:
        await js.create_key_value(config)
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise


async def ensure_tool_consumer(
    js: JetStreamContext, tool: str, options: ConsumerOptions, names: Names = DEFAULT_NAMES
) -> None:
    """Create or update the durable pull consumer every replica serving `tool` shares."""
    durable = names.tool_consumer(tool)
    config = ConsumerConfig(
        # Named as well as durable, so that the create request's subject carries the name
        # and the filter (`$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`): what a
        # role's permissions can pin (deploy/nats/roles.conf).
        name=durable,
        durable_name=durable,
        filter_subject=names.work_subject(tool),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=_seconds(options.ack_wait),
        max_deliver=-1,  # Tether counts attempts itself and dead-letters (see worker).
        max_ack_pending=options.max_ack_pending,
        max_waiting=512,
    )
    await _ensure_consumer(js, names.work_stream, config)


async def _ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """Create the consumer, or update it only if a setting we own differs.

    Every worker start calls this; skipping the no-op update keeps replicas from
    disturbing a consumer that others are pulling from.
    """
    assert config.durable_name is not None
    try:
        info = await js.consumer_info(stream, config.durable_name)
    except NotFoundError:
        await js.add_consumer(stream, config)
        return
    current = info.config
    if (
        current.ack_wait != config.ack_wait
        or current.max_ack_pending != config.max_ack_pending
        or current.filter_subject != config.filter_subject
    ):
        await js.add_consumer(stream, config)


async def ensure_timers_consumer(js: JetStreamContext, names: Names = DEFAULT_NAMES) -> None:
    """The dispatchers' consumer of fired timers (deadlines, input expiries)."""
    config = _dispatchers_consumer(names.timers_consumer, names.timers_work_subject)
    await _ensure_consumer(js, names.work_stream, config)


async def ensure_dispatcher_consumer(js: JetStreamContext, names: Names = DEFAULT_NAMES) -> None:
    config = _dispatchers_consumer(names.dispatcher_consumer, names.submit_subject)
    await _ensure_consumer(js, names.submit_stream, config)


def _dispatchers_consumer(durable: str, subject: str) -> ConsumerConfig:
    """A consumer every dispatcher shares; its handling is quick, so a short ack wait."""
    return ConsumerConfig(
        name=durable,  # see `ensure_tool_consumer`
        durable_name=durable,
        filter_subject=subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=10.0,
        max_deliver=-1,
        max_ack_pending=1000,
        max_waiting=512,
    )
