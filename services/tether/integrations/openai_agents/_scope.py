"""Where a durable run of the SDK is: the step, its journal, its meter (a context variable,
so the SDK's own objects need no extra argument)."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tether.integrations.adapters import RunInput
from tether.integrations.journal import Journal
from tether.integrations.meter import Meter
from tether.schemas.records import Usage
from tether.tools.context import StepContext


@dataclass
class Scope:
    """A run inside step `ctx`: its calls are units of `journal` (None: inside a unit
    that journals a whole sub-agent, whose calls run live) and spend through `meter`."""

    ctx: StepContext
    journal: Journal | None
    meter: Meter | None = None
    """Opened at the first model call when not given (the drop-in `Runner` is sync)."""
    counted: set[int] | None = None
    """Earlier attempts whose usage the worker counted when one failed (see `failed`)."""
    added: set[int] = field(default_factory=set)
    """Earlier attempts whose units' usage this attempt counts again."""
    spent: list[Usage] | None = None
    """What the model calls of a sub-agent run whole inside one unit spent (None: not in
    one); sub-agents called at once each keep their own."""

    async def metered(self) -> Meter:
        if self.meter is None:
            self.meter = await Meter.open(self.ctx, RunInput())
        return self.meter


current: ContextVar[Scope | None] = ContextVar("tether_openai_agents_scope", default=None)


def counted_name(attempt: int) -> str:
    """The memo of attempt `attempt` of the step that ended by an error: the attempts
    whose units' usage the worker counted with it (a killed attempt counted nothing)."""
    return f"usage-counted-a{attempt}"


async def replayed_usage(scope: Scope, payload: dict[str, Any]) -> None:
    """A unit read back counts its usage on this attempt when nothing counted it yet:
    its attempt was killed, and no attempt since failed after counting it again. A unit
    an earlier step ran (before an approval) was counted on that step's checkpoint."""
    usage, attempt = payload.get("usage"), payload.get("attempt")
    if usage is None or payload.get("step") != scope.ctx.step or not isinstance(attempt, int):
        return
    if scope.counted is None:
        ctx, counted = scope.ctx, set[int]()
        for earlier in range(1, ctx.attempt):
            counted.update(await ctx.recall(counted_name(earlier), type=list[int]) or [])
        scope.counted = counted
    if attempt not in scope.counted:
        scope.added.add(attempt)
        scope.ctx.add_usage(msgspec.convert(usage, Usage))


async def failed(scope: Scope) -> None:
    """This attempt ends by an error, and the worker counts its usage: what it ran and
    what it counted again of killed attempts (see `replayed_usage`)."""
    attempts = sorted({scope.ctx.attempt, *scope.added})
    await asyncio.shield(scope.ctx.once(counted_name(scope.ctx.attempt), lambda: attempts))


def summed(spent: list[Usage]) -> dict[str, Any] | None:
    """What calls spent, as JSON to journal (None: nothing)."""
    if not spent:
        return None
    total = spent[0]
    for usage in spent[1:]:
        total = total + usage
    built: dict[str, Any] = msgspec.to_builtins(total)
    return built
