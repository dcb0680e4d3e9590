"""A foreign agent's model calls, counted on the task and bounded by its tree's budget
(I/O), as Tether's own agents' are (`agents.spending`): a call reserves its input and
the most it may answer before it is sent, and that most goes to the model as its
`max_tokens`, so a call cannot spend past the budget; it then settles at what it spent.
Calls may overlap (the tool calls of one response run at once, each maybe a sub-agent):
each settles the hold it took. A call that is a unit of the run's journal is marked in
flight while it runs (`agents.calls`), so that one a dead attempt sent and never saw
end counts as a request, cut off (tokens unknown), as Tether's own agents' calls do.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.agents import answer_caps, calls
from tether.agents.budget import (
    DEFAULT_OUTPUT_CAP,
    BudgetExceeded,
    Ledger,
    TreeBudget,
    cost,
    price_of,
    tree_root,
)
from tether.schemas.records import Usage

if TYPE_CHECKING:
    from tether.integrations.adapters import RunInput
    from tether.tools.context import StepContext

CHARS_PER_TOKEN = 3
"""How generously a call's input is estimated from its JSON (as `budget.worst_case`)."""


@dataclass(frozen=True)
class _Holding:
    """The call in flight in this asyncio task (each overlapping call runs in a task of
    its own): its meter (by id), the ledger key of its hold, its mark, its model."""

    meter: int
    key: str
    mark: str | None
    model: str


_holding: ContextVar[_Holding | None] = ContextVar("tether_meter_holding", default=None)


@dataclass
class Meter:
    """The budget of one run's tree, and what its calls spent in this attempt."""

    ctx: StepContext
    tree: TreeBudget | None = None
    calls: int = 0
    spent: list[Usage] = field(default_factory=list)

    @classmethod
    async def open(cls, ctx: StepContext, run: RunInput) -> Meter:
        """The run's meter; a root run that asks for a budget opens its tree's ledger."""
        root = ctx.task_id if ctx.parent is None else await tree_root(ctx)
        tree = TreeBudget(ctx, root)
        if ctx.parent is None and (run.token_budget or run.cost_budget):
            await tree.open(run.token_budget, run.cost_budget)
        return cls(ctx, tree)

    async def reserve(
        self, model: str, sent_chars: int, asked: int | None, mark: str | None = None
    ) -> int | None:
        """Hold call's input (`sent_chars` of JSON) and the most it may answer (`asked`,
        else `DEFAULT_OUTPUT_CAP`); the `max_tokens` to send (None: no budget). Raises
        BudgetExceeded when not even a short answer fits. `mark`: the call's own name in
        the step (its journal unit's), under which it is marked in flight."""
        self.calls += 1
        key = self._key()  # before any wait: an overlapping call counts one more
        _holding.set(_Holding(id(self), key, mark, model))
        cap = await self._hold(key, model, sent_chars, asked)
        if mark is not None and (left := await calls.begin(self.ctx, model, mark)) is not None:
            self.ctx.add_usage(left)  # a dead attempt sent this call and never saw it end
        return cap

    async def _hold(self, key: str, model: str, sent_chars: int, asked: int | None) -> int | None:
        if self.tree is None or (found := await self.tree.read()) is None:
            return None
        price = price_of(model)
        sent = sent_chars // CHARS_PER_TOKEN + 1
        want = asked or DEFAULT_OUTPUT_CAP
        capped: list[int] = []

        def held(ledger: Ledger) -> Ledger | None:
            cap = answer_caps.answer_cap(ledger, key, sent, want, price)
            if cap is None:
                return None
            capped[:] = [cap]
            return ledger.reserve(key, sent + cap, answer_caps.cost(sent, cap, price))

        if await self.tree.change(held) is None:
            spent = answer_caps.short(found[0], sent, price)
            raise BudgetExceeded(
                f"the task's budget is spent: {spent.ledger.short(spent.tokens, spent.usd)}"
            )
        self.tree.held = True
        return capped[0]

    async def settle(self, usage: Usage) -> Usage:
        """The call ended: count what it spent on the task and in the tree's ledger (the
        usage counted: priced where its model has a price)."""
        price = price_of(usage.model or "")
        if price is not None and usage.cost_usd is None:
            usage = Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_tokens=usage.cached_tokens,
                requests=usage.requests,
                model=usage.model,
                cost_usd=cost(usage, price),
            )
        self.ctx.add_usage(usage)
        self.spent.append(usage)
        if self.tree is not None and self.tree.held:
            key, tokens, usd = self._held(), usage.total_tokens, usage.cost_usd or 0.0
            await self.tree.change(lambda ledger: ledger.settle(key, tokens, usd))
        return usage

    async def release(self, error: BaseException | None = None) -> None:
        """The call ended by `error` before it said what it spent: nothing known, unless
        it was cut off in flight (the step cancelled or timed out): then a request, its
        tokens unknown. Either way its mark is closed: this attempt saw it end."""
        held = self._holding()
        if isinstance(error, asyncio.CancelledError) and held is not None:
            self.ctx.add_usage(calls.cut_off(held.model))
        if held is not None and held.mark is not None:
            await calls.end(self.ctx, held.mark)
        if self.tree is not None and self.tree.held:
            key = self._held()
            await self.tree.change(lambda ledger: ledger.release(key))

    def _holding(self) -> _Holding | None:
        """This task's call on this meter."""
        held = _holding.get()
        return held if held is not None and held.meter == id(self) else None

    def _held(self) -> str:
        """The key of the hold this task's call took on this meter, else the meter's own."""
        held = self._holding()
        return held.key if held is not None else self._key()

    def _key(self) -> str:
        return f"{self.ctx.idempotency_key}.c{self.calls}"
