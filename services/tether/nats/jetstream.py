"""JetStream requests on the hot path: publish with PubAck, API requests, subject lists.

Replies are decoded with msgspec and errors become Tether's (see `seam_error`): a lost
compare-and-set is a RevisionConflictError, other refusals keep their codes.
"""

from __future__ import annotations

import asyncio
import base64

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, NoStreamResponseError

from tether.nats import codes, headers
from tether.nats.acks import Acks
from tether.nats.replies import (
    ConsumerState,
    PubAck,
    consumer_state_decoder,
    message_reply_decoder,
    pub_ack_decoder,
    stream_subjects_decoder,
    success_decoder,
)
from tether.nats.requests import Requester
from tether.schemas.codec import encode
from tether.schemas.names import Names

PUBLISH_TIMEOUT = 5.0
BATCH = 1000
"""Messages a batched direct get asks for at once."""
Headers = dict[str, str] | None


class JetStream:
    """Publishes and requests of one connection, through one reply subscription."""

    def __init__(self, nc: NatsClient, names: Names) -> None:
        self.nc = nc
        self.names = names
        self._requests = Requester(nc, PUBLISH_TIMEOUT)
        self.acks = Acks()
        """Acks of this connection's tool steps, sent with its next write."""

    async def start(self) -> None:
        await self._requests.start()

    async def request(self, subject: str, data: bytes = b"", headers: Headers = None) -> Msg:
        await self.acks.send()
        return await self._requests.request(subject, data, headers)

    async def publish(self, subject: str, data: bytes, headers: Headers = None) -> PubAck:
        """A JetStream publish that waits for the PubAck."""
        await self.acks.send()
        try:
            reply = await self._requests.request(subject, data, headers)
        except NoRespondersError as exc:
            raise NoStreamResponseError from exc
        ack = pub_ack_decoder.decode(reply.data)
        if ack.error is not None:
            raise ack.error.exception()
        return ack

    async def last_message(self, stream: str, subject: str) -> tuple[int, bytes] | None:
        """The sequence and payload of the last message on `subject` (None: none)."""
        body = encode({"last_by_subj": subject})
        reply = await self.request(self.names.message_get_subject(stream), body)
        found = message_reply_decoder.decode(reply.data)
        if found.error is not None:
            if found.error.err_code == codes.NO_MESSAGE_FOUND:
                return None
            raise found.error.exception()
        message = found.message
        return None if message is None else (message.seq, base64.b64decode(message.data))

    async def delete_message(self, stream: str, sequence: int) -> bool:
        """Delete one message (no erase: its bytes need no overwriting); False when it
        is gone already (or, on a stream that denies deletes, when it may not go)."""
        body = encode({"seq": sequence, "no_erase": True})
        reply = await self.request(self.names.message_delete_subject(stream), body)
        done = success_decoder.decode(reply.data)
        if done.error is None:
            return True
        if done.error.err_code in codes.MESSAGE_GONE:
            return False
        raise done.error.exception()

    async def subjects(self, stream: str, subjects_filter: str) -> list[str]:
        """The subjects of a stream's messages, read from its subject list, a page of up
        to 100,000 per request."""
        return list(await self.subject_counts(stream, subjects_filter))

    async def subject_counts(self, stream: str, subjects_filter: str) -> dict[str, int]:
        """The subjects of a stream's messages, with how many each holds."""
        found: dict[str, int] = {}
        while True:
            body = encode({"subjects_filter": subjects_filter, "offset": len(found)})
            reply = await self.request(self.names.stream_info_subject(stream), body)
            info = stream_subjects_decoder.decode(reply.data)
            if info.error is not None:
                raise info.error.exception()
            page = info.state.subjects if info.state and info.state.subjects else {}
            found.update(page)
            if not page or len(found) >= info.total:
                return found

    async def direct_messages(self, stream: str, subjects_filter: str) -> list[Msg]:
        """Every message on `subjects_filter` in `stream`, in order, read by batched direct
        gets (`BATCH` a request, nats-server 2.11+) from a stream that allows them."""
        found: list[Msg] = []
        ended: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_reply(msg: Msg) -> None:
            if msg.headers and headers.STATUS in msg.headers:
                ended.put_nowait(msg)  # the end of a batch (204), none (404), a refusal
            else:
                found.append(msg)

        inbox = self.nc.new_inbox()
        subscription = await self.nc.subscribe(inbox, cb=on_reply)
        subject = self.names.direct_batch_subject(stream)
        start = 1
        try:
            while True:
                body = encode({"seq": start, "next_by_subj": subjects_filter, "batch": BATCH})
                await self.nc.publish(subject, body, reply=inbox)
                try:
                    end = await asyncio.wait_for(ended.get(), PUBLISH_TIMEOUT)
                except TimeoutError:
                    raise NatsTimeoutError from None
                said = end.headers or {}
                if said[headers.STATUS] == "404":
                    return found
                if said[headers.STATUS] != "204":
                    code, words = int(said[headers.STATUS]), said.get(headers.DESCRIPTION, "")
                    raise APIError(code=code, description=words)
                if int(said.get(headers.NUM_PENDING, 0)) == 0:
                    return found
                start = int(said[headers.LAST_SEQUENCE]) + 1
        finally:
            await subscription.unsubscribe()

    async def last_sequence(self, stream: str) -> int:
        """The sequence of the last message stored in a stream."""
        reply = await self.request(self.names.stream_info_subject(stream))
        info = stream_subjects_decoder.decode(reply.data)
        if info.error is not None:
            raise info.error.exception()
        return info.state.last_seq if info.state is not None else 0

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState:
        """How far a durable consumer got (CONSUMER.INFO)."""
        reply = await self.request(self.names.consumer_info_subject(stream, durable))
        state = consumer_state_decoder.decode(reply.data)
        if state.error is not None:
            raise state.error.exception()
        return state
