"""Dead attempts of a step that runs a foreign agent (I/O): what they said and spent
that no report carried, streamed and counted once by a later attempt.

An attempt reports what it spent when it ends, with its result or with its error (the
worker counts a failed attempt's usage too); a killed attempt reports nothing, and
followers drop the text it streamed. So an attempt that reads back what an earlier
attempt of its step stored (a model call's response, a sub-agent's unit) streams its
text again, and counts its usage unless a failure of an earlier attempt counted it
already: each failure keeps the ids of what it counted (`Recount.failed`). What an
earlier step stored (before a wait for a person) was counted on that step's checkpoint.

A model call that a dead attempt sent and never saw end is counted too, as cut off,
tokens unknown: `Meter` keeps a mark per call (`agents.calls`).

Ids: the kit's units are counted by the attempt that ran them (`Recount.unit`), so a
failure keeps its attempt's number; a LangGraph thread's messages by their own ids
(`Recount.again`, its memo `graph-counted`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.schemas.records import Usage

if TYPE_CHECKING:
    from tether.tools.context import StepContext

COUNTED = "usage-counted"
"""The memos `<memo>-a<attempt>` a failed attempt keeps the ids it counted in."""


@dataclass
class Recount:
    """What earlier attempts of step `ctx` left uncounted, counted by this attempt."""

    ctx: StepContext
    memo: str = COUNTED
    counted: set[str] = field(default_factory=set)
    """Ids whose usage this attempt counted again (its report carries them)."""
    _before: set[str] | None = None

    async def before(self) -> set[str]:
        """The ids failures of earlier attempts of this step counted (read once)."""
        if self._before is None:
            ctx = self.ctx
            names = [f"{self.memo}-a{n}" for n in range(1, ctx.attempt)]
            found = await asyncio.gather(*(ctx.recall(n, type=list[int | str]) for n in names))
            self._before = {str(i) for ids in found for i in ids or ()}
        return self._before

    async def again(self, ident: str | None, usage: Usage | None, texts: Iterable[str]) -> None:
        """What an earlier attempt said (`texts`, streamed again) and spent (`usage`,
        counted unless a failure counted `ident`; None: unknown, not counted)."""
        for text in texts:
            if text:
                await self.ctx.stream(text)
        if usage is None or ident is None or ident in await self.before():
            return
        self.ctx.add_usage(usage)
        self.counted.add(ident)

    async def unit(
        self, stored: Mapping[str, Any], usage: Usage | None, texts: Iterable[str]
    ) -> None:
        """A unit read back, stored with the `step` and `attempt` that ran it: said and
        counted again when an earlier attempt of this step ran it."""
        step, attempt = stored.get("step"), stored.get("attempt")
        if step != self.ctx.step or not isinstance(attempt, int) or attempt >= self.ctx.attempt:
            return
        await self.again(str(attempt), usage, texts)

    async def failed(self, *own: str) -> None:
        """This attempt ends by an error and the worker counts its usage: keep what that
        is, its `own` ids (the kit's: its attempt) and those it counted again."""
        ids = sorted({*own, *self.counted})
        name = f"{self.memo}-a{self.ctx.attempt}"
        await asyncio.shield(self.ctx.once(name, lambda: ids))
