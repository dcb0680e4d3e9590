"""What the streams hold against what they may hold, and who leads them."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy
from nats.js.errors import KeyNotFoundError

from tether.nats.layout import expected_streams
from tether.nats.store import Store
from tether.schemas.names import Names


@dataclass(frozen=True)
class StreamSize:
    """A stream's state and its configured limits (-1 or 0: no limit)."""

    name: str
    messages: int
    bytes: int
    work_queue: bool
    max_msgs: int
    max_bytes: int
    max_age_s: float
    max_per_subject: int
    largest_subject: int
    """Messages on the stream's busiest subject (counted only when a per-subject limit
    above 1 applies; KV buckets keep one per key, which the server enforces itself)."""

    def over_limits(self) -> list[str]:
        """The limits this stream is past, as phrases."""
        over = []
        if self.max_msgs > 0 and self.messages > self.max_msgs:
            over.append(f"{self.messages} messages > max_msgs {self.max_msgs}")
        if self.max_bytes > 0 and self.bytes > self.max_bytes:
            over.append(f"{self.bytes} bytes > max_bytes {self.max_bytes}")
        if self.max_per_subject > 0 and self.largest_subject > self.max_per_subject:
            over.append(f"{self.largest_subject} on one subject > {self.max_per_subject}")
        return over

    def limits(self) -> str:
        parts = []
        if self.max_msgs > 0:
            parts.append(f"msgs {self.max_msgs}")
        if self.max_bytes > 0:
            parts.append(f"bytes {self.max_bytes}")
        if self.max_age_s > 0:
            parts.append(f"age {_age(self.max_age_s)}")
        if self.max_per_subject > 0:
            parts.append(f"{self.max_per_subject}/subject")
        if self.work_queue:
            parts.append("work queue")
        return ", ".join(parts) or "none"


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


async def stream_size(js: JetStreamContext, stream: str) -> StreamSize:
    info = await js.stream_info(stream)
    config, state = info.config, info.state
    per_subject = config.max_msgs_per_subject or -1
    largest = 0
    if per_subject > 1:
        subjects = (await js.stream_info(stream, subjects_filter=">")).state.subjects or {}
        largest = max(subjects.values(), default=0)
    return StreamSize(
        name=stream,
        messages=state.messages,
        bytes=state.bytes,
        work_queue=config.retention == RetentionPolicy.WORK_QUEUE,
        max_msgs=config.max_msgs or -1,
        max_bytes=config.max_bytes or -1,
        max_age_s=config.max_age or 0.0,
        max_per_subject=per_subject,
        largest_subject=largest,
    )


async def stream_sizes(js: JetStreamContext, names: Names) -> dict[str, StreamSize]:
    """Every stream of the installation (buckets and the object store included)."""
    return {stream: await stream_size(js, stream) for stream in expected_streams(names)}


async def leaders(js: JetStreamContext, streams: list[str]) -> dict[str, str]:
    """The server leading each stream's Raft group ("" while it has none)."""
    found = {}
    for stream in streams:
        info = await js.stream_info(stream)
        found[stream] = (info.cluster.leader or "") if info.cluster else ""
    return found


async def worker_entries(store: Store) -> tuple[int, int]:
    """Live keys in the workers bucket: worker beats, and every other key (held steps)."""
    beats = held = 0
    bucket = await store.js.key_value(store.names.workers_bucket)
    for key in await store.keys(store.names.workers_bucket):
        try:
            entry = await bucket.get(key)
        except KeyNotFoundError:
            continue  # deleted: its marker is still a message on the subject
        if entry.value:
            beats, held = (beats + 1, held) if "." not in key else (beats, held + 1)
    return beats, held


@dataclass(frozen=True)
class Snapshot:
    """Every stream's size, and what the workers bucket holds."""

    sizes: dict[str, StreamSize]
    beats: int
    held: int


async def snapshot(store: Store) -> Snapshot:
    sizes = await stream_sizes(store.js, store.names)
    return Snapshot(sizes, *await worker_entries(store))
