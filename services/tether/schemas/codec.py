"""Shared JSON encoder and typed decoders: built once, reused on the hot path."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from tether.schemas.events import AnyStatusEvent
from tether.schemas.plans import TaskSubmit
from tether.schemas.records import Checkpoint, TaskRecord
from tether.schemas.work import WorkMessage

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
encode = _encoder.encode

submit_decoder = msgspec.json.Decoder(TaskSubmit)
work_decoder = msgspec.json.Decoder(WorkMessage)
record_decoder = msgspec.json.Decoder(TaskRecord)
checkpoint_decoder = msgspec.json.Decoder(Checkpoint)
event_decoder: msgspec.json.Decoder[AnyStatusEvent] = msgspec.json.Decoder(AnyStatusEvent)


NESTED = "JSON nested too deeply"
"""What a decode that hit the recursion limit says (msgspec raises RecursionError)."""


def decode(data: bytes, type: type[T]) -> T:
    """Decode JSON into `type`; raises msgspec.ValidationError naming the bad field."""
    return msgspec.json.decode(data, type=type)


def to_builtins(value: Any) -> Any:
    """A Struct (or anything msgspec can encode) as plain JSON-compatible Python values."""
    return msgspec.to_builtins(value)
