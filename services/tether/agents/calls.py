"""A model call in flight, marked durably so that one its worker's death cut off still
counts (I/O): spend that was not kept is spend, even when how much is unknown.

Before a call, the step creates a mark, `<step key>.once._call` in the checkpoints
bucket (`_` starts no name a tool may give `ctx.once`); after it, the mark is closed. A
later attempt that finds the mark still open knows an earlier one died inside its call,
and counts that call as `unfinished` (tokens unknown). A call cut off in this process
(the task cancelled, the step timed out) closes its mark and is counted by the caller
(`cut_off`). A create, a read and a swap per call: small next to a call's seconds.
Foreign agents' calls (`integrations.meter`) keep a mark each, named after their
journal unit, and close it only when the call fails in the process: one that finished
is journaled, so no later attempt asks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from tether.errors import NatsUnavailableError, RevisionConflictError
from tether.schemas.records import Usage

if TYPE_CHECKING:
    from tether.tools.context import StepContext

CALL_MEMO = "_call"


class CallMark(msgspec.Struct, frozen=True, kw_only=True):
    attempt: int
    open: bool = True


CHARS_PER_TOKEN = 4
"""How a cut-off call's streamed text is counted in tokens (English runs about 4
characters a token): an estimate, marked as one (`Usage.streamed_tokens`)."""


def cut_off(model: str, streamed: int = 0) -> Usage:
    """One call sent and never finished: its tokens are unknown, but for the answer it
    had streamed (`streamed` characters), counted from its text."""
    counted = -(-streamed // CHARS_PER_TOKEN)  # a started token counts
    return Usage(
        requests=1, unfinished=1, model=model, output_tokens=counted, streamed_tokens=counted
    )


def cut_off_tokens(usage: Usage) -> str:
    """What is known of the tokens of calls cut off before they said: `tokens unknown`, or
    `~2,181 out counted from the stream` (the answer they had streamed)."""
    if not usage.streamed_tokens:
        return "tokens unknown"
    return f"~{usage.streamed_tokens:,} out counted from the stream, the rest unknown"


class Streamed:
    """A call's `on_delta`, counting the characters it passes on: what a call cut off
    before its usage came had answered so far."""

    def __init__(self, send: Callable[[str], Awaitable[None]]) -> None:
        self._send = send
        self.chars = 0

    async def __call__(self, text: str) -> None:
        self.chars += len(text)
        await self._send(text)


def _key(ctx: StepContext, memo: str) -> str:
    return ctx._store.names.once_key(ctx.task_id, ctx.step, memo, ctx.branch)


async def begin(ctx: StepContext, model: str, memo: str = CALL_MEMO) -> Usage | None:
    """Mark this attempt's call in flight (in the step's memo `memo`); the usage of a
    call an earlier attempt left open there (its worker died in it), or None."""
    checkpoints = ctx._store.checkpoints  # the agent runtime is Tether's own
    key, mine = _key(ctx, memo), msgspec.json.encode(CallMark(attempt=ctx.attempt))
    if await checkpoints.create_memo(key, mine) is mine:
        return None  # the step's first call: nothing was cut off before it
    found = await checkpoints.entry(key)
    if found is None:
        return None
    left = msgspec.json.decode(found[0], type=CallMark)
    with contextlib.suppress(RevisionConflictError):
        await checkpoints.swap(key, mine, found[1])
    return cut_off(model) if left.open and left.attempt != ctx.attempt else None


async def end(ctx: StepContext, memo: str = CALL_MEMO) -> None:
    """Close this attempt's mark: the call ended here, counted by whoever saw it end. A
    mark left open (NATS away) counts the call once more, as cut off."""
    checkpoints = ctx._store.checkpoints
    closed = msgspec.json.encode(CallMark(attempt=ctx.attempt, open=False))
    with contextlib.suppress(RevisionConflictError, NatsUnavailableError):
        found = await checkpoints.entry(_key(ctx, memo))
        if found is not None:
            await checkpoints.swap(_key(ctx, memo), closed, found[1])
