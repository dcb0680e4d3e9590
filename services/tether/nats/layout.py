"""The shape of Tether's installation as plain data: its streams, buckets and their
settings, and the stamp that says which shape `provision` applied. No I/O here."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import timedelta

from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from tether.nats.connection import NatsConfig
from tether.schemas.names import DEFAULT_NAMES, Names


@dataclass(frozen=True)
class Layout:
    """Retention and replication of Tether's JetStream objects."""

    names: Names = field(default_factory=lambda: DEFAULT_NAMES)
    replicas: int = 1
    """3 on a JetStream cluster."""
    duplicate_window: timedelta = timedelta(minutes=2)
    """How long a step's (and an event's) `Nats-Msg-Id` is remembered; must outlast a
    redelivery. A task id `tether gc` removed is free again after twice this."""
    status_max_age: timedelta = timedelta(days=7)
    status_per_task: int = 10_000
    dead_letter_max_age: timedelta = timedelta(days=30)
    heartbeat_ttl: timedelta = timedelta(hours=1)
    """How long a step's heartbeat key stays after its last write. A held step writes it
    once (and on progress), so this bounds the longest step that shows one."""
    index_tasks: bool = True
    """Keep the status index that makes a filtered list's first page fast (a row stored,
    and the one a task left deleted, with an ack, as its status changes); off, listing
    reads every record."""
    tokens_max_age: timedelta = timedelta(hours=1)
    """How long streamed text stays to follow (or resume) after it was written."""
    blob_threshold: int = 256 * 1024
    """Outputs (and submitted inputs) whose JSON is larger go to `tether-blobs`, once,
    under their content hash, and travel as `{"$blob": "sha256:…", "size": n}`. Below
    this, carrying a value inline is cheaper than an Object Store put and get."""

    @classmethod
    def for_config(cls, config: NatsConfig) -> Layout:
        return cls(names=config.names, replicas=config.replicas)


KV_DUPLICATE_WINDOW = timedelta(minutes=2)
"""nats-py's for a KV bucket without a TTL."""


def _seconds(value: timedelta) -> float:
    return value.total_seconds()


LAYOUT_VERSION = 4
"""The version of the installation's shape (streams, buckets and their settings) this
Tether provisions; raise it whenever that shape changes. A Tether that finds a higher one
leaves the installation as it is. 3: schedules moved from the work stream to a timers
stream of their own, and the work stream and blob stores refuse rollups
(`tether.nats.migration` moves a layout 2 installation's work stream). 4: sessions (the
stream `<PREFIX>_SESSIONS` and the bucket `<prefix>-sessions`), added beside the rest."""
STAMP = "tether.layout"
DIGEST = "tether.layout.digest"
"""Keys of the work stream's metadata (nats-server 2.10+) with which `provision` stamps an
installation, last: the layout version, and a digest of every setting it applied."""


def stream_configs(layout: Layout) -> list[StreamConfig]:
    """Every stream but the work stream (see `work_stream_config`)."""
    names = layout.names
    streams = [
        StreamConfig(
            name=names.submit_stream,
            subjects=[names.submit_subjects],
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=_seconds(layout.duplicate_window),
        ),
        StreamConfig(
            name=names.status_stream,
            subjects=[names.status_subjects],
            retention=RetentionPolicy.LIMITS,
            duplicate_window=_seconds(layout.duplicate_window),  # events' ids, as steps
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
            allow_rollup_hdrs=False,  # a row moves by a marker on its subject, no rollup
            allow_msg_ttl=True,  # unused since layout 3; left as installations have it
        ),
        StreamConfig(
            name=names.tokens_stream,
            subjects=[names.tokens_subjects],
            retention=RetentionPolicy.LIMITS,
            max_age=_seconds(layout.tokens_max_age),
            discard=DiscardPolicy.OLD,
            # Stored as each chunk comes (no async persist): a server killed mid-answer
            # that lost its last chunks would reuse their sequences, and a follower
            # resuming by sequence would skip new text. Text is batched, so this is cheap.
        ),
        builds_stream_config(layout),
        timers_stream_config(layout),
        StreamConfig(
            name=names.sessions_stream,
            subjects=[names.session_subjects()],
            retention=RetentionPolicy.LIMITS,
            # One message per subject: an edit (a publish that expects the sequence it
            # edits) replaces the message; a run's boundary is written once.
            max_msgs_per_subject=1,
            discard=DiscardPolicy.OLD,
            duplicate_window=_seconds(layout.duplicate_window),  # senders' message ids
            allow_rollup_hdrs=False,  # clients publish here
        ),
    ]
    for config in streams:
        config.num_replicas = layout.replicas
        config.storage = StorageType.FILE
    return streams


def builds_stream_config(layout: Layout) -> StreamConfig:
    """The builds bucket's stream, made as nats-py makes a KV bucket's but create-only:
    one message per key, and discard-new per key, so the server refuses any second write
    to a key (a put, a delete marker; rollups are off) whoever sends it. A build's tool
    (`<build>.<tool>`) is written once, by the build's first worker that serves it; only
    a purge of the build's keys (a stream admin's right: `tether gc`) frees them.
    nats-py's `create_key_value` cannot ask for `discard_new_per_subject`, hence the
    stream by hand (opened with `js.key_value`)."""
    names = layout.names
    bucket = names.builds_bucket
    return StreamConfig(
        name=names.kv_stream(bucket),
        subjects=[names.kv_subject(bucket, ">")],
        retention=RetentionPolicy.LIMITS,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
        allow_rollup_hdrs=False,
        deny_delete=True,
        allow_direct=layout.replicas == 1,  # as the other buckets (`bucket_configs`)
        duplicate_window=_seconds(KV_DUPLICATE_WINDOW),
        max_msgs=-1,
        max_bytes=-1,
        max_consumers=-1,
    )


def timers_stream_config(layout: Layout) -> StreamConfig:
    """The timers stream (`tether.nats.schedules`): schedules, and the timers they fired
    until a dispatcher takes them. nats-server turns rollups on for a stream with
    schedules whatever it is asked, so only the dispatchers may publish here."""
    names = layout.names
    return StreamConfig(
        name=names.timers_stream,
        subjects=[names.timer_subjects, names.fired_subjects],
        retention=RetentionPolicy.WORK_QUEUE,
        allow_msg_schedules=True,  # durable timers (nats-server 2.12+)
    )


def work_stream_config(layout: Layout, stamped: bool = True) -> StreamConfig:
    """The work stream, which carries the installation's stamp (so it is written last).
    It refuses rollups: every worker and dispatcher publishes into it."""
    names = layout.names
    config = StreamConfig(
        name=names.work_stream,
        subjects=[names.work_subjects],
        retention=RetentionPolicy.WORK_QUEUE,
        duplicate_window=_seconds(layout.duplicate_window),
        allow_rollup_hdrs=False,
        num_replicas=layout.replicas,
        storage=StorageType.FILE,
    )
    if stamped:
        config.metadata = {STAMP: str(LAYOUT_VERSION), DIGEST: layout_digest(layout)}
    return config


def bucket_configs(layout: Layout) -> list[KeyValueConfig]:
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
            (names.sessions_bucket, None),
        )
    ]


def graph_bucket_configs(layout: Layout) -> tuple[KeyValueConfig, ObjectStoreConfig]:
    """The graphs' bucket and blob store (`Names.graphs_bucket`), made as a
    `JetStreamSaver`'s `setup()` makes its own: one value per key, kept until `tether gc`
    removes the thread. Not part of the stamp (`layout_digest`): they are made when
    graphs are served (`tether.nats.provision.open_graphs`), or by `tether provision`."""
    names = layout.names
    kv = KeyValueConfig(
        bucket=names.graphs_bucket,
        history=1,
        replicas=layout.replicas,
        storage=StorageType.FILE,
        direct=layout.replicas == 1,  # as the other buckets (`bucket_configs`)
    )
    store = ObjectStoreConfig(
        bucket=names.graph_blobs_bucket, replicas=layout.replicas, storage=StorageType.FILE
    )
    return kv, store


def graph_streams(names: Names) -> list[str]:
    """The streams behind the graphs' bucket and blob store."""
    return [names.kv_stream(names.graphs_bucket), f"OBJ_{names.graph_blobs_bucket}"]


def layout_digest(layout: Layout) -> str:
    """A digest of every setting `provision` applies for `layout`, replicas aside (they
    are compared as they are: a process never lowers them)."""
    single = replace(layout, replicas=1)
    configs = [
        *stream_configs(single),
        work_stream_config(single, stamped=False),
        *bucket_configs(single),
    ]
    settings = [config.as_dict() for config in configs]
    settings.append(ObjectStoreConfig(bucket=layout.names.blobs_bucket).as_dict())
    settings.append({"bucket_rollups": False})  # (`provision.forbid_rollups`)
    settings.append({"blob_rollups": False})  # (`provision.forbid_rollups`, `nats.blobs`)
    data = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def expected_streams(names: Names) -> list[str]:
    """Every stream Tether's installation under `names` has (buckets and store included)."""
    buckets = [names.tasks_bucket, names.checkpoints_bucket, names.tools_bucket]
    buckets += [names.heartbeats_bucket, names.workers_bucket, names.builds_bucket]
    buckets += [names.sessions_bucket]
    streams = [names.submit_stream, names.work_stream, names.status_stream]
    streams += [names.dead_letter_stream, names.index_stream, names.tokens_stream]
    streams += [names.timers_stream, names.sessions_stream]
    return [*streams, *(names.kv_stream(b) for b in buckets), f"OBJ_{names.blobs_bucket}"]
