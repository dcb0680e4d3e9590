"""What a saver stores under each key, as JSON any language reads (pure: no I/O).

A channel value or a pending write is kept as the saver's serde wrote it, its type tag
beside it (`Typed`): inline as base64, or by reference to a blob when large. The rest
(ids, versions, metadata) is plain JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

Version = str | int | float
EMPTY = "empty"
"""The type tag of a channel that got a new version but no value (a `DeltaChannel`
between its snapshots), as LangGraph's own savers mark it: loaded as no value."""


class BlobRef(msgspec.Struct, frozen=True):
    """Tether's blob reference: `{"$blob": "sha256:<hex>", "size": <bytes>}`."""

    ref: str = msgspec.field(name="$blob")
    size: int = 0

    @property
    def digest(self) -> str:
        return self.ref.removeprefix("sha256:")


class Typed(msgspec.Struct, frozen=True, omit_defaults=True):
    """A value as `serde.dumps_typed` made it: its type tag (`msgpack`, `json`, `null`,
    `bytes`, ...; `empty`) and its bytes, inline (`data`, base64 in JSON) or in a blob."""

    type: str
    data: bytes | None = None
    blob: BlobRef | None = None


class ChannelValue(msgspec.Struct, frozen=True):
    """`<thread>.v.<ns>.<channel>.<version>`."""

    channel: str
    version: Version
    value: Typed


class PendingWrite(msgspec.Struct, frozen=True):
    """`<thread>.w.<ns>.<checkpoint_id>.<task_id>.<idx>`."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Typed


class CheckpointRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """`<thread>.c.<ns>.<checkpoint_id>`: a checkpoint without its channel values (those
    are the `ChannelValue`s its `channel_versions` name)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    v: int
    ts: str
    channel_versions: dict[str, Version]
    versions_seen: dict[str, dict[str, Version]]
    metadata: dict[str, Any]
    parent_checkpoint_id: str | None = None
    updated_channels: list[str] | None = None
    extra: Typed | None = None
    """Any other field of the checkpoint (`pending_sends` of old formats), through serde."""


class Latest(msgspec.Struct, frozen=True):
    """`<thread>.l.<ns>`: the namespace's newest checkpoint."""

    checkpoint_id: str


class BlobMark(msgspec.Struct, frozen=True):
    """`<thread>.b.<sha256 hex>`: the thread stored this blob (written before the blob,
    so removing the thread finds every blob it may have stored)."""

    size: int
    stored_at: datetime


class RunMark(msgspec.Struct, frozen=True):
    """`<thread>.r.<ns>.<run_id>.<checkpoint_id>`."""

    run_id: str


encode = msgspec.json.Encoder().encode
checkpoint_decoder = msgspec.json.Decoder(CheckpointRecord)
value_decoder = msgspec.json.Decoder(ChannelValue)
write_decoder = msgspec.json.Decoder(PendingWrite)
latest_decoder = msgspec.json.Decoder(Latest)
mark_decoder = msgspec.json.Decoder(BlobMark)

KNOWN_FIELDS = frozenset(
    {"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"}
)


def blob_frame(thread_id: str, data: bytes) -> bytes:
    """A blob's bytes: its thread as a JSON string on the first line, then the value's
    serde bytes. Naming the thread makes every thread's blobs its own (the name is the
    hash of the content), so removing a thread removes no other thread's blob."""
    return msgspec.json.encode(thread_id) + b"\n" + data


def unframe(frame: bytes) -> bytes:
    """The serde bytes of a blob made by `blob_frame`."""
    return frame.split(b"\n", 1)[1]


def referenced(value: Typed) -> str | None:
    """The digest of the blob a value is in, if it is in one."""
    return value.blob.digest if value.blob is not None else None
