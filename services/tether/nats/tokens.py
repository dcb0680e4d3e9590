"""Streamed text: a step writes `TokenChunk`s to `<prefix>.tokens.<task_id>` (a stream
kept for an hour), and any client follows them from the start or from where it stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import msgspec
import nats.errors
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from tether.nats.cancellation import raise_if_cancelled
from tether.nats.connection import failures_translated, translated
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
    sequence seen: nothing is repeated and nothing skipped."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    if after:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1
        )
    with failures_translated():
        sub = await store.js.subscribe(
            store.names.tokens_subject(task_id),
            stream=store.names.tokens_stream,
            ordered_consumer=True,
            config=config,
        )
    seen = after
    try:
        while True:
            raise_if_cancelled()
            with failures_translated():
                try:
                    msg = await sub.next_msg(timeout=IDLE_CHECK)
                except nats.errors.TimeoutError:
                    msg = None
            if msg is not None:
                seen = int(msg.metadata.sequence.stream)
                with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                    yield _chunk_decoder.decode(msg.data), seen
                continue
            if await _ended(store, task_id) and seen >= await _last_sequence(store, task_id):
                return
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _ended(store: Store, task_id: str) -> bool:
    found = await store.get_record(task_id)
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
