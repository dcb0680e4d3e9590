"""Streamed text: a step writes `TokenChunk`s to `<prefix>.tokens.<task_id>` (a stream
kept for an hour), and any client follows them from the start or from where it stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import msgspec
from nats.js.errors import NotFoundError

from tether.errors import NatsUnavailableError
from tether.nats.connection import translated
from tether.nats.replay import Replay
from tether.nats.store import Store
from tether.schemas.tasks import TokenChunk

_chunk_decoder = msgspec.json.Decoder(TokenChunk)
IDLE_CHECK = 0.5
"""With no chunk for this long, a follower asks whether the task has ended."""


class TokenWriter:
    """The chunks of one attempt of one step, numbered from 0."""

    def __init__(
        self, store: Store, task_id: str, step: int, attempt: int, branch: int | None
    ) -> None:
        self._store = store
        self._first = TokenChunk(task_id=task_id, step=step, attempt=attempt, seq=0, branch=branch)
        self._seq = 0

    async def write(self, delta: str) -> None:
        if delta:
            await self._chunk(delta=delta)

    async def close(self) -> None:
        """Mark the attempt's text complete (before the step's checkpoint is written)."""
        await self._chunk(done=True)

    async def _chunk(self, delta: str = "", done: bool = False) -> None:
        chunk = msgspec.structs.replace(self._first, seq=self._seq, delta=delta, done=done)
        self._seq += 1
        await self._store.publish_token(chunk)


async def token_chunks(
    store: Store, task_id: str, after: int = 0
) -> AsyncIterator[tuple[TokenChunk, int]]:
    """Every chunk of a task with its stream sequence, from after sequence `after` (0: from
    the start), until the task has ended and no chunk is left. Resume with the last
    sequence seen: nothing is repeated and nothing skipped, a NATS restart included."""
    names = store.names
    subject = names.tokens_subject(task_id)
    async with Replay(store.nc, store.js, names.tokens_stream, subject, after) as replay:
        while True:
            msg = await replay.next(IDLE_CHECK)
            if msg is not None:
                with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                    yield _chunk_decoder.decode(msg.data), replay.seen
                continue
            if replay.connected and await _over(store, task_id, replay.seen):
                return


async def _over(store: Store, task_id: str, seen: int) -> bool:
    """Whether the task has ended and its last chunk was seen (False while NATS is away)."""
    try:
        return await _ended(store, task_id) and seen >= await _last_sequence(store, task_id)
    except NatsUnavailableError:
        return False


async def _ended(store: Store, task_id: str) -> bool:
    found = await store.records.get(task_id)
    return found is None or found.record.status.is_terminal


@translated
async def _last_sequence(store: Store, task_id: str) -> int:
    """The stream sequence of the task's latest chunk: every chunk is written before the
    step that wrote it completes, so once the task has ended this is the last one."""
    try:
        msg = await store.js.get_last_msg(
            store.names.tokens_stream, store.names.tokens_subject(task_id)
        )
    except NotFoundError:
        return 0
    return int(msg.seq or 0)
