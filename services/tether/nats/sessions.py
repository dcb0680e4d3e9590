"""Sessions on JetStream: each session's state in `<prefix>-sessions` (compare-and-set
only), its inbox on `<prefix>.session.<id>.in.<message id>` and its run boundaries on
`<prefix>.session.<id>.out.<run>`, one message per subject (`Names.sessions_stream`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from tether.errors import RevisionConflictError
from tether.nats import headers
from tether.nats.consumers import ensure_sessions_consumer
from tether.nats.delivery import Consumer
from tether.nats.failures import translating
from tether.nats.inbox import stored_after
from tether.nats.jetstream import JetStream
from tether.nats.kv import Bucket
from tether.nats.replay import Replay
from tether.schemas.codec import encode
from tether.schemas.names import Names
from tether.schemas.sessions import RunStarted, SessionMessage, SessionState

_message = msgspec.json.Decoder(SessionMessage)
_state = msgspec.json.Decoder(SessionState)
_started = msgspec.json.Decoder(RunStarted)
READ_AT_ONCE = 200
"""Inbox messages one read takes at most (the rest at the next)."""


class Stored(NamedTuple):
    """A message of a session's inbox as stored: its sequence, id and content."""

    seq: int
    message_id: str
    message: SessionMessage


class Versioned(NamedTuple):
    state: SessionState
    revision: int


@translating
class Sessions:
    def __init__(
        self, nc: NatsClient, js: JetStreamContext, jetstream: JetStream, bucket: Bucket
    ) -> None:
        self._nc = nc
        self._js = js
        self._jetstream = jetstream
        self._bucket = bucket
        self.names: Names = jetstream.names

    # -- state -------------------------------------------------------------------------
    async def get(self, session_id: str) -> Versioned | None:
        found = await self._bucket.get(session_id)
        if found is None:
            return None
        return Versioned(_state.decode(found.value), found.revision)

    async def change(self, session_id: str, state: SessionState, revision: int) -> int:
        """Compare-and-set (`revision` 0: create); RevisionConflictError when it moved."""
        if revision == 0:
            made = await self._bucket.create(session_id, encode(state))
            if made is None:
                raise RevisionConflictError(self._bucket.subject(session_id), "exists")
            return made
        return await self._bucket.update(session_id, encode(state), revision)

    async def states(self) -> dict[str, SessionState]:
        """Every session's state, by id."""
        return {key: _state.decode(value) for key, value in (await self._bucket.scan()).items()}

    async def forget(self, session_id: str) -> None:
        """Remove a session's state and inbox (`tether gc`: an operator's purge)."""
        names = self.names
        await self._js.purge_stream(
            names.sessions_stream, subject=names.session_subjects(session_id)
        )
        await self._js.purge_stream(
            names.kv_stream(names.sessions_bucket),
            subject=names.kv_subject(names.sessions_bucket, session_id),
        )

    # -- the inbox ---------------------------------------------------------------------
    async def put(
        self, session_id: str, message_id: str, message: SessionMessage, expected: int = 0
    ) -> int:
        """Store a message where the last on its subject has sequence `expected` (0: the
        first); its sequence, or RevisionConflictError. A first one carries its id as
        `Nats-Msg-Id`, so a repeat within the duplicate window is the same message."""
        subject = self.names.session_in_subject(session_id, message_id)
        sent = {headers.EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected)}
        if expected == 0:
            sent[headers.MSG_ID] = f"{session_id}.{message_id}"
        return (await self._jetstream.publish(subject, encode(message), sent)).seq

    async def latest(self, session_id: str, message_id: str) -> Stored | None:
        """The message as it is now (edited, taken, ...); None when there is none."""
        subject = self.names.session_in_subject(session_id, message_id)
        found = await self._jetstream.last_message(self.names.sessions_stream, subject)
        if found is None:
            return None
        return Stored(found[0], message_id, _message.decode(found[1]))

    async def after(self, session_id: str, seq: int) -> list[Stored]:
        """The inbox's messages stored after sequence `seq`, in order (one that does not
        decode, written by hand, is left out)."""
        subject = self.names.session_in_subject(session_id)
        found: list[Stored] = []
        async for msg in stored_after(self._js, self.names.sessions_stream, subject, seq):
            message_id = self.names.session_of(msg.subject or "")[1]
            try:
                found.append(Stored(msg.seq or 0, message_id, _message.decode(msg.data or b"")))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if len(found) == READ_AT_ONCE:
                break
        return found

    async def consumer(self) -> Consumer:
        """The dispatchers' shared consumer of every session's inbox."""
        await ensure_sessions_consumer(self._js, self.names)
        names = self.names
        return await Consumer.bind(self._js, names.sessions_stream, names.sessions_consumer)

    async def on_ended(self, heard: Callable[[str], Awaitable[None]]) -> None:
        """Hear the id of every task that ends (a hint: the record says how)."""
        names = self.names
        prefix = len(names.ended_subject("", "")) - 1  # `<prefix>.ended.`

        async def ended(msg: Msg) -> None:
            await heard(msg.subject[prefix:].rsplit(".", 1)[0])

        await self._nc.subscribe(names.ended_subject("*"), cb=ended)

    # -- run boundaries ----------------------------------------------------------------
    async def mark_run(self, started: RunStarted) -> None:
        """Write a run's boundary once (a second write, after a crash, is refused)."""
        subject = self.names.session_out_subject(started.session_id, started.run)
        sent = {headers.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}
        try:
            await self._jetstream.publish(subject, encode(started), sent)
        except RevisionConflictError:
            pass

    def runs(self, session_id: str, after: int = 0) -> Replay:
        """A reader of the session's run boundaries after stream sequence `after`."""
        names = self.names
        subject = names.session_out_subject(session_id)
        return Replay(self._nc, self._js, names.sessions_stream, subject, after)


def decode_run(data: bytes) -> RunStarted | None:
    try:
        return _started.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
