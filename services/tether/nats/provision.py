"""Idempotent creation of Tether's streams, buckets and per-tool consumers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

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
from tether.nats.connection import NatsConfig
from tether.schemas.names import DEFAULT_NAMES, Names

# NATS error codes (never match on description text).
STREAM_NAME_IN_USE = 10058


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
    heartbeat_ttl: timedelta = timedelta(seconds=30)
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


async def provision(js: JetStreamContext, layout: Layout = Layout()) -> None:
    """Create every stream, bucket and store Tether needs; safe to call from every process."""
    names = layout.names
    storage = StorageType.FILE
    streams = [
        StreamConfig(
            name=names.submit_stream,
            subjects=[names.submit_subject],
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=_seconds(layout.duplicate_window),
        ),
        StreamConfig(
            name=names.work_stream,
            subjects=[names.work_subjects, names.timer_subjects],
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=_seconds(layout.duplicate_window),
            allow_msg_schedules=True,  # durable sleep (nats-server 2.12+)
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
        config.storage = storage
        await _ensure_stream(js, config)
    for bucket, ttl in (
        (names.tasks_bucket, None),
        (names.checkpoints_bucket, None),
        (names.tools_bucket, None),
        (names.heartbeats_bucket, _seconds(layout.heartbeat_ttl)),
        (names.workers_bucket, None),
    ):
        # Direct gets are one request instead of a JSON API call, but on a cluster any
        # replica may answer them, possibly before it has applied the latest write; the
        # protocol reads its own writes, so replicated buckets read from the leader.
        await _ensure_bucket(
            js,
            KeyValueConfig(
                bucket=bucket,
                history=1,
                ttl=ttl,
                replicas=layout.replicas,
                storage=storage,
                direct=layout.replicas == 1,
            ),
        )
    try:
        await js.create_object_store(
            names.blobs_bucket,
            config=ObjectStoreConfig(replicas=layout.replicas, storage=storage),
        )
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise


async def open_installation(js: JetStreamContext, layout: Layout, create: bool) -> None:
    """Make sure the installation under `layout.names` is there before a process binds to
    it: with `create`, create or update it; without, raise NotProvisionedError naming
    what is missing."""
    if create:
        await provision(js, layout)
    elif absent := await missing(js, layout.names):
        raise NotProvisionedError(layout.names.prefix, absent)


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
        await js.add_stream(_replicable(config))
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
        assert config.name is not None
        current = (await js.stream_info(config.name)).config
        config.num_replicas = max(config.num_replicas or 1, current.num_replicas or 1)
        await js.update_stream(_replicable(config))


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
    config = ConsumerConfig(
        durable_name=names.tool_consumer(tool),
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
        durable_name=durable,
        filter_subject=subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=10.0,
        max_deliver=-1,
        max_ack_pending=1000,
        max_waiting=512,
    )
