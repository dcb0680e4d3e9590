"""JetStream's JSON replies (PubAck, API errors, stream info), decoded with msgspec:
nats-py uses json and dataclasses, which costs on the hot path."""

from __future__ import annotations

import msgspec
from nats.js.errors import APIError, KeyWrongLastSequenceError

WRONG_LAST_SEQUENCE = (10071, 10164)
"""err_codes of a compare-and-set that lost (stream and KV flavours)."""


class ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""

    def exception(self) -> APIError:
        """nats-py's exception for this error, so callers keep catching what they know."""
        if self.err_code in WRONG_LAST_SEQUENCE:
            return KeyWrongLastSequenceError(description=self.description)
        return APIError(code=self.code, err_code=self.err_code, description=self.description)


class PubAck(msgspec.Struct):
    """JetStream's reply to a publish, decoded with msgspec (nats-py uses json + a dataclass)."""

    seq: int = 0
    duplicate: bool = False
    error: ApiError | None = None


pub_ack_decoder = msgspec.json.Decoder(PubAck)


class StreamState(msgspec.Struct):
    subjects: dict[str, int] | None = None


class StreamSubjects(msgspec.Struct):
    """The part of JetStream's STREAM.INFO reply that lists subjects, a page at a time."""

    state: StreamState | None = None
    total: int = 0
    error: ApiError | None = None


stream_subjects_decoder = msgspec.json.Decoder(StreamSubjects)
