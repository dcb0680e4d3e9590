"""Idempotent creation of the installation `layout` describes, and the stamp check that
lets a process whose NATS user may not create streams start without trying."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from enum import Enum
from typing import TypeVar

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError

from tether.errors import NotProvisionedError
from tether.nats.codes import STREAM_NAME_IN_USE
from tether.nats.connection import Refused, unless_refused
from tether.nats.consumers import ensure_schedules_consumer, ensure_timers_consumer
from tether.nats.layout import (
    DIGEST,
    LAYOUT_VERSION,
    STAMP,
    Layout,
    bucket_configs,
    expected_streams,
    graph_bucket_configs,
    graph_streams,
    layout_digest,
    stream_configs,
    work_stream_config,
)
from tether.nats.migration import bring_back, set_aside
from tether.schemas.names import Names

log = logging.getLogger("tether.nats")
T = TypeVar("T")
_DEFAULT_LAYOUT = Layout()  # a frozen value, shared as `provision`'s default

REFUSED = "$JS.API.STREAM."
"""Requests a user who may not provision is refused (creating or updating a stream)."""


class _Refused(Exception):
    """The server refused (or never answered) a request to create or update a stream."""


async def provision(js: JetStreamContext, layout: Layout = _DEFAULT_LAYOUT) -> None:
    """Create (or update) every stream, bucket and store Tether needs, then stamp the
    installation with its layout, and make the graphs' bucket and blob store (which a
    worker that may not create streams cannot make when it first serves a graph: see
    `open_graphs`); safe to call from every process. Raises NotProvisionedError at the
    first refusal when this NATS user may not create streams."""
    try:
        await _provision(js, layout)
        await _provision_graphs(js, layout)
    except _Refused as exc:
        raise NotProvisionedError(layout.names.prefix, [], refused=str(exc)) from None


async def _provision(js: JetStreamContext, layout: Layout) -> None:
    names = layout.names
    await _unless_refused(js, set_aside(js, names), "move the work stream (layout 2)")
    for config in stream_configs(layout):
        await _ensure_stream(js, config)
    for bucket in bucket_configs(layout):
        await _unless_refused(js, _ensure_bucket(js, bucket), f"create bucket {bucket.bucket}")
    store = ObjectStoreConfig(replicas=layout.replicas, storage=StorageType.FILE)
    blobs = names.blobs_bucket
    await _unless_refused(
        js, _ensure_object_store(js, blobs, store), f"create object store {blobs}"
    )
    await _ensure_stream(js, work_stream_config(layout))  # the stamp: everything else is there
    # The dispatchers' consumer of timer requests exists from the start: the work queue
    # then refuses any other consumer whose filter overlaps it, such as a worker's
    # `<prefix>.work.*`, which a permission's `*` cannot tell from a tool's name (timer
    # requests would be readable, and deletable, through it). So does their consumer of
    # fired timers. A dispatcher creates both too, as it starts.
    schedules = ensure_schedules_consumer(js, names)
    await _unless_refused(js, schedules, "create the dispatchers' schedules consumer")
    timers = ensure_timers_consumer(js, names)
    await _unless_refused(js, timers, "create the dispatchers' timers consumer")
    await _unless_refused(js, bring_back(js, names), "move the work stream (layout 2)")


async def open_graphs(js: JetStreamContext, names: Names) -> None:
    """Make sure the graphs' bucket and blob store (`Names.graphs_bucket`) are there, before
    a graph's first step on a connection. Absent, they are made at the replicas of the
    installation's tasks bucket if this NATS user may create streams (`tether dev`, a
    worker with every right); a user that may not (the worker of deploy/nats/roles.conf)
    is refused at once and raises NotProvisionedError naming them. Present, nothing is
    asked of the server but their info: the locked-down worker is refused nothing."""
    if not await _absent(js, graph_streams(names)):
        return
    tasks = await js.stream_info(names.kv_stream(names.tasks_bucket))
    layout = Layout(names=names, replicas=tasks.config.num_replicas or 1)
    try:
        await _provision_graphs(js, layout)
    except (_Refused, NatsTimeoutError) as exc:  # unanswered: how a refusal shows elsewhere
        refused = str(exc) if isinstance(exc, _Refused) else "no answer to a create request"
        if absent := await _absent(js, graph_streams(names)):  # or another made them since
            raise NotProvisionedError(names.prefix, absent, refused=refused) from None


async def _provision_graphs(js: JetStreamContext, layout: Layout) -> None:
    kv, store = graph_bucket_configs(layout)
    await _unless_refused(js, _ensure_bucket(js, kv), f"create bucket {kv.bucket}")
    assert store.bucket is not None
    made = _ensure_object_store(js, store.bucket, store)
    await _unless_refused(js, made, f"create object store {store.bucket}")


async def _ensure_object_store(
    js: JetStreamContext, bucket: str, config: ObjectStoreConfig
) -> None:
    try:
        await js.create_object_store(bucket, config=config)
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
    await forbid_rollups(js, f"OBJ_{bucket}")  # see `tether.nats.blobs`


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
    refuses a stream request on this connection."""
    try:
        return await unless_refused(js._nc, call, REFUSED)
    except Refused as exc:
        raise _Refused(f"not allowed to {what}") from exc


async def missing(js: JetStreamContext, names: Names) -> list[str]:
    """The streams of the installation under `names` that are not there (all of them when
    nothing lives under that prefix)."""
    return await _absent(js, expected_streams(names))


async def _absent(js: JetStreamContext, streams: list[str]) -> list[str]:
    absent = []
    for stream in streams:
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
        await _unless_refused(js, js.add_stream(config), f"create stream {config.name}")
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
        assert config.name is not None
        current = (await js.stream_info(config.name)).config
        config.num_replicas = max(config.num_replicas or 1, current.num_replicas or 1)
        if config.allow_direct and config.num_replicas > 1:
            config.allow_direct = False  # replicated: read from the leader (`bucket_configs`)
        # Fixed when the stream was made (an older Tether made its tokens stream `async`;
        # remove that stream to have it made anew).
        config.persist_mode = current.persist_mode
        await _unless_refused(js, js.update_stream(config), f"update stream {config.name}")


async def _ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> None:
    try:
        await js.create_key_value(config)
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
    assert config.bucket is not None
    await forbid_rollups(js, f"KV_{config.bucket}")


async def forbid_rollups(js: JetStreamContext, stream: str) -> None:
    """Turn off rollups on a bucket's (or an object store's) stream. nats-py makes them
    with rollups on, and then whoever may put one key may send `Nats-Rollup: all` with
    it, which purges the whole bucket: a worker that writes its steps' checkpoints could
    erase every task's. Tether never rolls a bucket up (it deletes a key with a marker,
    stores a blob without one: `tether.nats.blobs`; a purge is an operator's API call)."""
    config = (await js.stream_info(stream)).config
    if config.allow_rollup_hdrs:
        config.allow_rollup_hdrs = False
        await js.update_stream(config)
