"""Streamed text: a step writes `TokenChunk`s to `<prefix>.tokens.<task_id>` (a stream
kept for an hour), in batches of what arrived within 25 ms, and any client follows them
from the start or from where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import msgspec
from nats.js.errors import NotFoundError

from tether.errors import NatsUnavailableError
from tether.nats.failures import translated
from tether.nats.replay import Replay
from tether.nats.store import Store
from tether.schemas.work import TokenChunk

_chunk_decoder = msgspec.json.Decoder(TokenChunk)
IDLE_CHECK = 0.5
"""With no chunk for this long, a follower asks whether the task has ended."""
SOON = 0.02
"""How long after a step's last chunk a follower first asks."""
MISSING_LOOKS = 3
"""Looks (IDLE_CHECK apart) that must find no record before a follower takes the task
for removed."""


FLUSH_EVERY = 0.025
"""Seconds text waits to go out with what follows it: a model streaming hundreds of
tokens a second sends a chunk per 25 ms instead of one per token (a fiftieth of the
messages), and one streaming slower sends each token at once."""
FLUSH_SIZE = 4096
"""Characters that go out at once, however soon after the last chunk."""


class TokenWriter:
    """The chunks of one attempt of one step, numbered from 0. Text is batched: the first
    piece goes out at once, then at most one chunk per `FLUSH_EVERY`."""

    def __init__(
        self, store: Store, task_id: str, step: int, attempt: int, branch: int | None
    ) -> None:
        self._store = store
        self._first = TokenChunk(task_id=task_id, step=step, attempt=attempt, seq=0, branch=branch)
        self._seq = 0
        self._pending: list[str] = []
        self._size = 0
        self._sent_at = -FLUSH_EVERY
        self._timer: asyncio.TimerHandle | None = None
        self._later: asyncio.Task[None] | None = None

    async def write(self, delta: str) -> None:
        if not delta:
            return
        self._pending.append(delta)
        self._size += len(delta)
        wait = self._sent_at + FLUSH_EVERY - time.monotonic()
        if wait <= 0 or self._size >= FLUSH_SIZE:
            await self._flush()
        elif self._timer is None:  # the text must not wait for a next piece that is slow
            self._timer = asyncio.get_running_loop().call_later(wait, self._flush_soon)

    async def close(self) -> None:
        """Send what is pending and mark the attempt's text complete (before the step's
        checkpoint is written)."""
        await self._flush()
        await self._chunk(done=True)

    def discard(self) -> None:
        """The attempt ended without an answer (or was stopped): send nothing more."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending.clear()

    def _flush_soon(self) -> None:
        self._timer = None
        self._later = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        delta = "".join(self._pending)
        self._pending.clear()
        self._size = 0
        self._sent_at = time.monotonic()
        await self._chunk(delta=delta)

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
        idle = IDLE_CHECK
        missing = 0
        while True:
            msg = await replay.next(idle)
            if msg is not None:
                with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                    chunk = _chunk_decoder.decode(msg.data)
                    # After a step's last chunk the task may end at once: look soon.
                    idle = SOON if chunk.done else IDLE_CHECK
                    yield chunk, replay.seen
                continue
            idle = IDLE_CHECK
            if not replay.connected:
                continue
            ended = await _ended(store, task_id)
            # No record: removed, or a server just restarted answering before it has
            # loaded the bucket. Only a record missing at several looks ends the feed.
            missing = missing + 1 if ended is None else 0
            if (ended or missing >= MISSING_LOOKS) and await _all_seen(store, task_id, replay.seen):
                return


async def _ended(store: Store, task_id: str) -> bool | None:
    """Whether the task has ended (None: no record, or NATS away)."""
    try:
        found = await store.records.get(task_id)
    except NatsUnavailableError:
        return False
    return None if found is None else found.record.status.is_terminal


async def _all_seen(store: Store, task_id: str, seen: int) -> bool:
    """Whether the last chunk stored was read (no answer, after chunks were read: a
    restarted server not ready yet, so not yet)."""
    try:
        last = await last_text_sequence(store, task_id)
    except NatsUnavailableError:
        return False
    return seen >= last and (last > 0 or seen == 0)


@translated
async def last_text_sequence(store: Store, task_id: str) -> int:
    """The stream sequence of the task's latest chunk: every chunk is written before the
    step that wrote it completes, so once the task has ended this is the last one."""
    try:
        msg = await store.js.get_last_msg(
            store.names.tokens_stream, store.names.tokens_subject(task_id)
        )
    except NotFoundError:
        return 0
    return int(msg.seq or 0)
