"""A budget across an agent's whole tree: tokens and dollars, reserved before each call.

A task tree (an agent, its parallel tool calls, its sub-agents and theirs) shares one
ledger, stored under `<root task id>.budget` in the checkpoint bucket and changed only
by compare-and-set. Before each LLM call anywhere in the tree, the call reserves its
worst case (the tokens of what it sends, estimated from its size, plus the most it may
answer, `max_tokens` or `DEFAULT_OUTPUT_CAP`); no call starts whose reservation does not
fit. After the call, the reservation is replaced by what the call really spent.

The pure part (`Ledger`, prices, estimates) is apart from the I/O (`TreeBudget`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from tether.agents.errors import BudgetExceeded as BudgetExceeded
from tether.errors import RevisionConflictError, TerminalError
from tether.schemas.records import Usage

if TYPE_CHECKING:
    from tether.tools.context import StepContext

DEFAULT_OUTPUT_CAP = 4096
"""The most a call may answer when its settings set no `max_tokens`."""
CHARS_PER_TOKEN = 3
"""A token is about 4 characters of English; 3 errs on the side of a larger reservation."""
MAX_TREE_DEPTH = 100


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float
    cached: float | None = None
    """Cached input tokens (None: as `input`)."""


PRICES: dict[str, Price] = {
    "gpt-5": Price(input=1.25, output=10.0, cached=0.125),
    "gpt-5-mini": Price(input=0.25, output=2.0, cached=0.025),
    "gpt-5-nano": Price(input=0.05, output=0.4, cached=0.005),
    "gpt-4.1": Price(input=2.0, output=8.0, cached=0.5),
    "gpt-4.1-mini": Price(input=0.4, output=1.6, cached=0.1),
    "gpt-4.1-nano": Price(input=0.1, output=0.4, cached=0.025),
    "gpt-4o": Price(input=2.5, output=10.0, cached=1.25),
    "gpt-4o-mini": Price(input=0.15, output=0.6, cached=0.075),
    "o3": Price(input=2.0, output=8.0, cached=0.5),
    "o4-mini": Price(input=1.1, output=4.4, cached=0.275),
}
"""OpenAI's list prices for standard processing (openai.com/api/pricing, as published in
2025). Change or add entries here, or give a model its own: `OpenAIModel(price=...)`."""


def price_of(model: str, own: Price | None = None) -> Price | None:
    """The model's price: its own, else the table's entry for the longest name it starts
    with (`gpt-4o-mini-2024-07-18` is priced as `gpt-4o-mini`)."""
    if own is not None:
        return own
    known = [name for name in PRICES if model == name or model.startswith(name + "-")]
    return PRICES[max(known, key=len)] if known else None


def cost(usage: Usage, price: Price) -> float:
    """What `usage` cost in dollars."""
    cached = usage.cached_tokens
    fresh = usage.input_tokens - cached
    cached_price = price.input if price.cached is None else price.cached
    return (fresh * price.input + cached * cached_price + usage.output_tokens * price.output) / 1e6


def worst_case(messages: list[dict[str, Any]], tools: list[dict[str, Any]], cap: int) -> int:
    """The most tokens a call may spend: what it sends, estimated generously, and `cap`."""
    sent = len(msgspec.json.encode(messages)) + len(msgspec.json.encode(tools))
    return sent // CHARS_PER_TOKEN + 1 + cap


def prompt_floor(reported: tuple[int, int] | None, messages: list[dict[str, Any]]) -> int:
    """The least a conversation's next call sends: the prompt tokens the model reported
    for its previous call (`reported`: with how many of `messages` that call was sent),
    plus what was added since, estimated. A long system prompt or tool schemas count
    for more than their characters tell; a model's own count does not guess."""
    if reported is None:
        return 0
    tokens, sent = reported
    added = messages[sent:]
    return tokens + (len(msgspec.json.encode(added)) // CHARS_PER_TOKEN + 1 if added else 0)


def output_cap(options: dict[str, Any]) -> int:
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = options.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_OUTPUT_CAP


class Ledger(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a tree may spend, has spent, and holds for calls in flight."""

    tokens: int | None = None
    usd: float | None = None
    spent_tokens: int = 0
    spent_usd: float = 0.0
    held: dict[str, tuple[int, float]] = msgspec.field(default_factory=dict)
    """Reservations of calls in flight, by call (`<task>.<step>[.b<branch>]`)."""
    asking: str | None = None
    """The task that asks a person to raise the budget (others wait for its answer)."""
    stopped: bool = False
    """A person said stop: every call in the tree fails from now on."""

    def reserve(self, key: str, tokens: int, usd: float) -> Ledger | None:
        """The ledger with the call's reservation, or None when it does not fit (a
        retried call's earlier reservation is replaced, not added to)."""
        held = {k: v for k, v in self.held.items() if k != key}
        if not self._fits(
            tokens + sum(t for t, _ in held.values()), usd + sum(u for _, u in held.values())
        ):
            return None
        held[key] = (tokens, usd)
        return msgspec.structs.replace(self, held=held)

    def spent_for(self, tokens: int, usd: float) -> bool:
        """Whether a call of this worst case cannot fit even once the calls in flight
        have settled (else it only has to wait for them)."""
        return not self._fits(tokens, usd)

    def _fits(self, tokens: int, usd: float) -> bool:
        if self.stopped:
            return False
        if self.tokens is not None and self.spent_tokens + tokens > self.tokens:
            return False
        return self.usd is None or self.spent_usd + usd <= self.usd

    def settle(self, key: str, tokens: int, usd: float) -> Ledger:
        """The call ended: its reservation gives way to what it spent."""
        held = {k: v for k, v in self.held.items() if k != key}
        return msgspec.structs.replace(
            self,
            held=held,
            spent_tokens=self.spent_tokens + tokens,
            spent_usd=self.spent_usd + usd,
        )

    def release(self, key: str) -> Ledger:
        """The call failed before it spent anything we know of."""
        return msgspec.structs.replace(self, held={k: v for k, v in self.held.items() if k != key})

    def answered(self, answer: Any, asker: str) -> Ledger:
        """A person's answer to the asker: raise a limit (never lower: an answer read
        twice changes nothing) or stop."""
        answer = answer if isinstance(answer, dict) else {}
        tokens, usd = self.tokens, self.usd
        if isinstance(answer.get("tokens"), int) and tokens is not None:
            tokens = max(tokens, answer["tokens"])
        if isinstance(answer.get("usd"), int | float) and usd is not None:
            usd = max(usd, float(answer["usd"]))
        asking = None if self.asking == asker else self.asking
        stopped = self.stopped or answer.get("stop") is True
        return msgspec.structs.replace(self, tokens=tokens, usd=usd, asking=asking, stopped=stopped)

    def limited(self, tokens: int | None) -> Ledger:
        """A new token limit (`update_agent`): set as told, lower too."""
        return msgspec.structs.replace(self, tokens=tokens)

    def at_least(self, tokens: int | None, usd: float | None) -> Ledger:
        """The limits raised to `tokens` and `usd` where those are higher (an agent whose
        default budget was raised since the tree opened with it); never lowered, and a
        limit the tree does not have is not added."""
        higher_tokens = None if self.tokens is None else max(self.tokens, tokens or 0)
        higher_usd = None if self.usd is None else max(self.usd, usd or 0.0)
        if (higher_tokens, higher_usd) == (self.tokens, self.usd):
            return self
        return msgspec.structs.replace(self, tokens=higher_tokens, usd=higher_usd)

    def short(self, tokens: int, usd: float) -> str:
        """Why a call of this worst case does not fit: what it needs, and the least limit
        that holds it once the calls in flight have settled."""
        if self.stopped:
            return "a person said to stop"
        needs = []
        if self.tokens is not None and self.spent_tokens + tokens > self.tokens:
            least = self.spent_tokens + tokens
            needs.append(f"up to {tokens:,} tokens (a limit of at least {least:,})")
        if self.usd is not None and self.spent_usd + usd > self.usd:
            needs.append(f"up to ${usd:.4f} (a limit of at least ${self.spent_usd + usd:.4f})")
        return "the next call needs " + " and ".join(needs) if needs else "calls in flight hold it"

    def spent(self) -> str:
        """`"budget of 50,000 tokens spent (49,200 so far, 4,500 in flight)"` and the like."""
        held_tokens = sum(t for t, _ in self.held.values())
        held_usd = sum(u for _, u in self.held.values())
        parts = []
        if self.tokens is not None:
            parts.append(
                f"{self.tokens:,} tokens ({self.spent_tokens:,} spent, {held_tokens:,} held)"
            )
        if self.usd is not None:
            parts.append(f"${self.usd:.2f} (${self.spent_usd:.4f} spent, ${held_usd:.4f} held)")
        return "budget of " + " and ".join(parts) + " reached"


BUDGET_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tokens": {"type": "integer", "minimum": 1, "description": "A new token limit."},
        "usd": {"type": "number", "exclusiveMinimum": 0, "description": "A new limit, in $."},
        "stop": {"type": "boolean", "description": "Stop the run instead."},
    },
}


class TreeBudget:
    """The ledger of the tree a step belongs to, read and changed by compare-and-set."""

    def __init__(self, ctx: StepContext, root: str) -> None:
        self._checkpoints = ctx._store.checkpoints  # the agent runtime is Tether's own
        self.key = f"{root}.budget"
        self.held = False
        """Whether this step's call holds a reservation (the tree has a budget)."""

    async def read(self) -> tuple[Ledger, int] | None:
        found = await self._checkpoints.entry(self.key)
        return None if found is None else (msgspec.json.decode(found[0], type=Ledger), found[1])

    async def open(self, tokens: int | None, usd: float | None) -> None:
        """Create the ledger (the tree's root agent, on its first turn)."""
        opened = Ledger(tokens=tokens, usd=usd)
        await self._checkpoints.create_memo(self.key, msgspec.json.encode(opened))

    async def limit(self, tokens: int, spent: Usage) -> None:
        """A new token limit (`update_agent`), opening the ledger if the tree has none yet
        (what the task has `spent` so far counts against it)."""
        opened = msgspec.json.encode(
            Ledger(tokens=tokens, spent_tokens=spent.total_tokens, spent_usd=spent.cost_usd or 0.0)
        )
        if await self._checkpoints.create_memo(self.key, opened) != opened:
            await self.change(lambda ledger: ledger.limited(tokens))

    async def change(self, change: Callable[[Ledger], Ledger | None]) -> Ledger | None:
        """Apply `change(ledger) -> Ledger | None` by compare-and-set; the new ledger, or
        None when `change` declined (or there is no ledger)."""
        while True:
            found = await self.read()
            if found is None:
                return None
            new = change(found[0])
            if new is None:
                return None
            try:
                await self._checkpoints.swap(self.key, msgspec.json.encode(new), found[1])
            except RevisionConflictError:
                continue
            return new


async def tree_root(ctx: StepContext) -> str:
    """The id of the task at the top of this step's tree of tasks."""
    task_id, parent = ctx.task_id, ctx.parent
    for _ in range(MAX_TREE_DEPTH):
        if parent is None:
            return task_id
        above = await ctx.other_task(parent.task_id)
        if above is None:
            return parent.task_id
        task_id, parent = above.task_id, above.parent
    raise TerminalError(f"task {ctx.task_id!r} is more than {MAX_TREE_DEPTH} tasks deep")
