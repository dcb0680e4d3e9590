"""JetStream's JSON replies (PubAck, API errors, stream info), decoded with msgspec:
nats-py uses json and dataclasses, which costs on the hot path."""

from __future__ import annotations

import msgspec
from nats.js.errors import APIError

from tether.errors import TetherError
from tether.nats.failures import seam_error


class ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""

    def exception(self) -> TetherError:
        """Tether's exception for this error (see `seam_error`): a lost compare-and-set
        is a RevisionConflictError, other refusals keep their codes."""
        return seam_error(
            APIError(code=self.code, err_code=self.err_code, description=self.description)
        )


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
