"""How many tokens a call may answer within its tree's budget (pure): that many is sent
as the call's `max_tokens`, so its reservation is what it can really spend, and no call
answers past the budget.

- A call answers up to what it asks (its settings' `max_tokens`, else
  `DEFAULT_OUTPUT_CAP`), or less when that is all the budget leaves after what was
  spent and the call's input (estimated generously).
- A call that would get less than it asks while other calls of the tree are in flight
  waits for them: they settle at what they spent, usually well under what they held.
- A call that has room for less than `MIN_ANSWER` tokens even once nothing is in flight
  does not start: the task fails or asks, as `on_budget` says.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.agents.budget import Ledger, Price, output_cap
from tether.agents.errors import Spent
from tether.agents.truncation import BUDGET_CAP

if TYPE_CHECKING:
    from tether.agents.models import OpenAIModel

MIN_ANSWER = 16
"""The fewest tokens a call is sent to answer with: below it, the budget is spent."""
CAP_NAMES = ("max_completion_tokens", "max_tokens", "max_output_tokens")
OPENAI_HOST = "api.openai.com"


def short(ledger: Ledger, sent: int, price: Price | None) -> Spent:
    """The `Spent` of a call that has no room for even a `MIN_ANSWER`: it needs its
    input (`sent`) and that."""
    return Spent(ledger, sent + MIN_ANSWER, cost(sent, MIN_ANSWER, price))


def cost(sent: int, answer: int, price: Price | None) -> float:
    """The dollars a call sending `sent` tokens and answering `answer` may cost."""
    return 0.0 if price is None else (sent * price.input + answer * price.output) / 1e6


def room(ledger: Ledger, key: str, sent: int, price: Price | None, held: bool = True) -> int | None:
    """The tokens call `key` may answer with: what the limits leave after the spend, the
    other calls' reservations (unless `held` is False) and its input. None: no limit."""
    if ledger.stopped:
        return 0
    others = [v for k, v in ledger.held.items() if k != key] if held else []
    rooms = []
    if ledger.tokens is not None:
        rooms.append(ledger.tokens - ledger.spent_tokens - sum(t for t, _ in others) - sent)
    if ledger.usd is not None and price is not None and price.output > 0:
        left = ledger.usd - ledger.spent_usd - sum(u for _, u in others) - cost(sent, 0, price)
        rooms.append(math.floor(left * 1e6 / price.output) - 1)  # -1: float rounding
    return min(rooms) if rooms else None


def answer_cap(ledger: Ledger, key: str, sent: int, asked: int, price: Price | None) -> int | None:
    """The call's `max_tokens` under this ledger; None when it must wait for the calls in
    flight or cannot start (`room` with `held=False` tells which)."""
    left = room(ledger, key, sent, price)
    if left is None or left >= asked:
        return asked
    if any(k != key for k in ledger.held) or left < MIN_ANSWER:
        return None
    return left


def capped(model: OpenAIModel, options: dict[str, Any], cap: int) -> dict[str, Any]:
    """The call's options with its answer capped at `cap`: every cap the settings name is
    lowered to it; with none named, `max_completion_tokens` for OpenAI's own API (its
    reasoning models refuse `max_tokens`), else `max_tokens` (what llama.cpp, Ollama and
    vLLM read; the Responses API takes either as `max_output_tokens`)."""
    settings: Mapping[str, Any] = {**model.settings, **options}
    named = [n for n in CAP_NAMES if isinstance(settings.get(n), int)]
    if not named:
        url = model.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_HOST
        named = ["max_completion_tokens" if OPENAI_HOST in url else "max_tokens"]
    lowered = {
        n: value
        for n in named
        if (value := min(cap, settings.get(n) or cap)) != model.settings.get(n) or n in options
    }  # a model's own setting left as it is stays the model's (its truncation says so)
    if cap >= output_cap(dict(settings)):
        return {**options, **lowered}  # what it asked fits: its own limit applies
    return {**options, **lowered, BUDGET_CAP: cap}


def needs(spent: Spent, asked: int) -> str:
    """What the next call needs (`asked`: what it answers with, room enough), for a
    person or an error: what it sends, and what it may answer."""
    ledger = spent.ledger
    if (
        ledger.stopped
        or ledger.tokens is None
        or ledger.spent_tokens + spent.tokens <= ledger.tokens
    ):
        return ledger.short(spent.tokens, spent.usd)  # the dollars bind, not the tokens
    sent = spent.tokens - MIN_ANSWER
    least = ledger.spent_tokens + spent.tokens
    return (
        f"the next call sends about {sent:,} tokens and answers with up to "
        f"{asked:,} (at least {MIN_ANSWER}): a limit of at least {least:,}, "
        f"{full_limit(spent, asked):,} for a full answer"
    )


def full_limit(spent: Spent, asked: int) -> int:
    """The token limit that lets the next call answer with all it asks."""
    return spent.ledger.spent_tokens + spent.tokens - MIN_ANSWER + asked
