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
    last_seq: int = 0


class StreamSubjects(msgspec.Struct):
    """The part of JetStream's STREAM.INFO reply that lists subjects, a page at a time."""

    state: StreamState | None = None
    total: int = 0
    error: ApiError | None = None


stream_subjects_decoder = msgspec.json.Decoder(StreamSubjects)


class StoredMessage(msgspec.Struct):
    seq: int = 0
    data: str = ""
    """Base64, as JetStream sends it."""


class MessageReply(msgspec.Struct):
    """JetStream's reply to STREAM.MSG.GET (a message, or an error)."""

    message: StoredMessage | None = None
    error: ApiError | None = None


message_reply_decoder = msgspec.json.Decoder(MessageReply)


class Success(msgspec.Struct):
    """JetStream's reply to STREAM.MSG.DELETE."""

    success: bool = False
    error: ApiError | None = None


success_decoder = msgspec.json.Decoder(Success)


class SequencePair(msgspec.Struct):
    stream_seq: int = 0


class ConsumerState(msgspec.Struct):
    """The part of JetStream's CONSUMER.INFO reply that says how far a consumer got."""

    ack_floor: SequencePair = msgspec.field(default_factory=SequencePair)
    num_pending: int = 0
    num_ack_pending: int = 0
    error: ApiError | None = None

    def handled_through(self, sequence: int) -> bool:
        """Whether every message of the consumer stored up to `sequence` is acknowledged:
        nothing left at all, or its ack floor past it."""
        idle = self.num_pending == 0 and self.num_ack_pending == 0
        return idle or self.ack_floor.stream_seq >= sequence


consumer_state_decoder = msgspec.json.Decoder(ConsumerState)
