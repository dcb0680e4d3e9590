"""Submissions no dispatcher has taken yet: the submit stream is a work queue, so what it
holds is exactly what waits for one."""

from __future__ import annotations

from datetime import datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from tether.clock import utcnow
from tether.nats import headers
from tether.nats.failures import translating
from tether.schemas.names import Names

SCAN_LIMIT = 1000
"""The newest submissions a lookup reads; a backlog deeper than this is not searched."""


class _Id(msgspec.Struct):
    task_id: str | None = None


_id_decoder = msgspec.json.Decoder(_Id)


@translating
class Submissions:
    def __init__(self, js: JetStreamContext, names: Names) -> None:
        self._js = js
        self._names = names

    async def queued(self, task_id: str) -> datetime | None:
        """When a submission of `task_id` was stored, if it still waits in the stream."""
        state = (await self._js.stream_info(self._names.submit_stream)).state
        if not state.messages:
            return None
        first = max(state.first_seq, state.last_seq - SCAN_LIMIT + 1)
        for seq in range(state.last_seq, first - 1, -1):
            try:
                msg = await self._js.get_msg(self._names.submit_stream, seq)
            except NotFoundError:
                continue  # taken already
            if _names_task(msg.headers, msg.data or b"", task_id):
                return msg.time or utcnow()
        return None

    async def dispatcher_running(self) -> bool:
        """Whether a dispatcher is taking submissions: it has a fetch waiting, or holds
        one it has not settled."""
        try:
            info = await self._js.consumer_info(
                self._names.submit_stream, self._names.dispatcher_consumer
            )
        except NotFoundError:
            return False  # no dispatcher ever ran here
        return bool(info.num_waiting or info.num_ack_pending)


def _names_task(sent: dict[str, str] | None, data: bytes, task_id: str) -> bool:
    if (sent or {}).get(headers.MSG_ID) == task_id:
        return True
    try:
        return _id_decoder.decode(data).task_id == task_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
