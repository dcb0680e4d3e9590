"""What running agents are told (`send_message`, `update_agent`), in order, exactly once.

Each entry is stored twice: on `<prefix>.status.<task_id>.inbox`, where the agent reads
what came after the last entry it took (its steps record the sequence), and as a status
event on `<prefix>.status.<task_id>`, for everyone following the task.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from tether.nats import headers
from tether.nats.jetstream import JetStream
from tether.schemas.codec import encode
from tether.schemas.events import Steering
from tether.schemas.names import Names

READ_AT_ONCE = 100
"""Entries one read takes at most (the rest come at the agent's next call)."""
_decoder: msgspec.json.Decoder[Steering] = msgspec.json.Decoder(Steering)


class Inbox:
    def __init__(self, js: JetStreamContext, jetstream: JetStream, names: Names) -> None:
        self._js = js
        self._jetstream = jetstream
        self._names = names

    async def put(self, entry: Steering, msg_id: str) -> int:
        """Store `entry` (once per `msg_id`); its stream sequence."""
        sent = {headers.MSG_ID: msg_id}
        subject = self._names.inbox_subject(entry.task_id)
        return (await self._jetstream.publish(subject, encode(entry), sent)).seq

    async def after(self, task_id: str, seq: int) -> list[tuple[int, Steering]]:
        """The entries stored after stream sequence `seq`, in order, with theirs (an entry
        that does not decode, written by hand, is skipped)."""
        subject = self._names.inbox_subject(task_id)
        found: list[tuple[int, Steering]] = []
        async for msg in stored_after(self._js, self._names.status_stream, subject, seq):
            try:
                found.append((msg.seq or 0, _decoder.decode(msg.data or b"")))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if len(found) == READ_AT_ONCE:
                break
        return found

    async def ids_after(self, task_id: str, seq: int) -> list[str]:
        """The ids its senders gave the entries stored after stream sequence `seq`."""
        subject = self._names.inbox_subject(task_id)
        tail = len(f"{task_id}.inbox.")
        stream = self._names.status_stream
        return [
            (msg.headers or {}).get(headers.MSG_ID, "")[tail:]
            async for msg in stored_after(self._js, stream, subject, seq)
        ]


async def stored_after(
    js: JetStreamContext, stream: str, subject: str, seq: int
) -> AsyncIterator[RawStreamMsg]:
    """The messages on `subject` (a pattern) stored after sequence `seq`, in order, one
    direct request each: for the few a reader has not seen yet."""
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq + 1, subject=subject, next=True)
        except NotFoundError:
            return
        seq = msg.seq or seq + 1
        yield msg
