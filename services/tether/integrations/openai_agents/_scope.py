"""Where a durable run of the SDK is: the step, its journal, its meter (a context variable,
so the SDK's own objects need no extra argument)."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import msgspec
from pydantic_core import to_jsonable_python

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
    spent: list[Usage] | None = None
    """What the model calls of a sub-agent run whole inside one unit spent (None: not in
    one); sub-agents called at once each keep their own."""

    async def metered(self) -> Meter:
        if self.meter is None:
            self.meter = await Meter.open(self.ctx, RunInput())
        return self.meter


current: ContextVar[Scope | None] = ContextVar("tether_openai_agents_scope", default=None)


def replayed_usage(payload: dict[str, Any]) -> Usage | None:
    """The usage a unit read back was stored with (None: none)."""
    usage = payload.get("usage")
    return None if usage is None else msgspec.convert(usage, Usage)


def summed(spent: list[Usage]) -> dict[str, Any] | None:
    """What calls spent, as JSON to journal (None: nothing)."""
    if not spent:
        return None
    total = spent[0]
    for usage in spent[1:]:
        total = total + usage
    built: dict[str, Any] = msgspec.to_builtins(total)
    return built


def as_json(value: Any) -> Any:
    """A tool's output or a guardrail's info as JSON to journal; the SDK shows the model
    `str(output)`, so a value with no JSON form is kept as that text."""
    try:
        return to_jsonable_python(value)
    except Exception:
        return str(value)
