"""The budget protocol of an agent's turn, around the ledger of `agents.budget`: open the
tree's budget, reserve a call's input and the most it may answer, sent as its
`max_tokens` (`answer_caps`; waiting while calls elsewhere settle), settle or release
it, and when not even a short answer fits, fail or ask.

- A run may ask for less than its agent's `token_budget`/`cost_budget`, never more: the
  agent's budget is a ceiling, refused (not clamped) when a run asks past it, so whoever
  asked learns it at once rather than finding a smaller budget spent later.
- The tree's ledger opens at its first turn with a budget, or mid-run when `update_agent`
  gives a token budget to a tree that had none; from then on every call is bounded.
- A root that took its agent's default follows that default upwards: raise the agent's
  budget, restart its workers, retry, and the tree may spend the new amount.
- A call that does not fit fails the task (`on_budget="fail"`, saying how to raise it and
  retry), or asks a person, saying what the next call needs (and why an answer given was
  not enough), or waits for the task of the tree that asks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any

import msgspec

from tether.agents import answer_caps
from tether.agents.budget import (
    BUDGET_ANSWER,
    BudgetExceeded,
    Ledger,
    Price,
    TreeBudget,
    output_cap,
    worst_case,
)
from tether.agents.conversation import AgentStep, Entry, Journal
from tether.agents.errors import BudgetAboveCeiling as BudgetAboveCeiling
from tether.agents.errors import Spent as Spent
from tether.agents.errors import TokenBudgetExceeded as TokenBudgetExceeded
from tether.errors import TerminalError
from tether.schemas.codec import to_builtins
from tether.schemas.plans import StepSpec
from tether.schemas.records import Usage
from tether.tools.results import NeedsInput, NextSteps

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.tools.context import StepContext

log = logging.getLogger("tether.agents")
BUDGET_POLL = 2.0
"""Seconds a call waits, at first, while another task of its tree asks about the budget."""


def check_ceiling(agent: Agent, start: AgentStep) -> None:
    """Refuse a run that asks for more than the agent's budget (less is fine)."""
    asked: list[tuple[str, float, float, str]] = []
    if agent.token_budget is not None and start.token_budget is not None:
        asked.append(("token_budget", start.token_budget, agent.token_budget, "{:,}"))
    if agent.cost_budget is not None and start.cost_budget is not None:
        asked.append(("cost_budget", start.cost_budget, agent.cost_budget, "${:,.2f}"))
    for field, wanted, ceiling, shown in asked:
        if wanted > ceiling:
            raise BudgetAboveCeiling(
                f"agent {agent.name!r}: this run asks for a {field} of {shown.format(wanted)}, "
                f"more than the agent's {shown.format(ceiling)}, the most a run may have: "
                f"ask for {shown.format(ceiling)} or less, or leave it out (an operator may "
                "raise a running task with update_agent)"
            )


async def open_tree(tree: TreeBudget, agent: Agent, journal: Journal) -> TreeBudget:
    """The tree's budget; its first agent turn with a budget opens it."""
    tokens = journal.token_budget or agent.token_budget
    usd = journal.cost_budget or agent.cost_budget
    if journal.turns == 0 and (tokens or usd):
        await tree.open(tokens, usd)
    return tree


async def take_limits(tree: TreeBudget, limits: list[int], journal: Journal) -> None:
    """Apply `update_agent`'s token budgets in order (the latest wins), opening the
    ledger if the tree has none: the next call is bounded by it."""
    for limit in limits:
        await tree.limit(limit, journal.usage)


def defaults_followed(agent: Agent, ctx: StepContext, journal: Journal) -> Ledger | None:
    """The limits a root that took its agent's default budget rises to (None: it took
    none: the run gave its own, or an update set one, or it is a task below a root)."""
    if ctx.parent is not None:
        return None
    tokens = agent.token_budget if journal.token_budget is None else None
    usd = agent.cost_budget if journal.cost_budget is None else None
    return Ledger(tokens=tokens, usd=usd) if tokens or usd else None


async def reserve(
    agent: Agent,
    tree: TreeBudget,
    key: str,
    price: Price | None,
    call: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]],
    follow: Ledger | None,
    floor: int = 0,
) -> int | None:
    """Hold the call's input and the most it may answer (`call`: its messages, tools and
    options) in the tree's budget, if it has one, raised first to `follow`'s limits;
    return that most, to send as its `max_tokens` (None: no budget). Its input is held
    at `floor` at least (`budget.prompt_floor`). Raises `Spent` when not even a short
    answer fits (see `answer_caps`)."""
    found = await tree.read()
    if found is None:
        return None
    if found[0].usd is not None and price is None:
        raise TerminalError(
            f"agent {agent.name!r}: no price for the model {agent.llm.name!r}, so a "
            "budget in dollars cannot hold: give it one (OpenAIModel(..., price=Price("
            "input=..., output=...)), dollars per million tokens) or add it to "
            "tether.agents.PRICES"
        )
    messages, specs, options = call
    asked = output_cap({**agent.llm.settings, **options})
    sent = max(worst_case(messages, specs, 0), floor)
    capped: list[int] = []

    def held(ledger: Ledger) -> Ledger | None:
        if follow is not None:
            ledger = ledger.at_least(follow.tokens, follow.usd)
        cap = answer_caps.answer_cap(ledger, key, sent, asked, price)
        if cap is None:
            return None
        capped[:] = [cap]
        return ledger.reserve(key, sent + cap, answer_caps.cost(sent, cap, price))

    for attempt in itertools.count():
        if await tree.change(held) is not None:
            tree.held = True
            return capped[0]
        found = await tree.read()
        if found is None:
            return None
        ledger = found[0] if follow is None else found[0].at_least(follow.tokens, follow.usd)
        left = answer_caps.room(ledger, key, sent, price, held=False)
        if left is not None and left < answer_caps.MIN_ANSWER:
            raise answer_caps.short(ledger, sent, price)
        # It fits once calls in flight elsewhere in the tree settle: wait for them.
        await asyncio.sleep(min(0.05 * 2**attempt, 2.0))
    raise AssertionError("unreachable")


async def settle(tree: TreeBudget, key: str, spent: Usage) -> None:
    """Replace the call's reservation by what it really spent."""
    if tree.held:
        await tree.change(
            lambda ledger: ledger.settle(key, spent.total_tokens, spent.cost_usd or 0.0)
        )


async def release(tree: TreeBudget, key: str) -> None:
    """Give back the reservation of a call that failed (its attempt may be retried)."""
    if tree.held:
        await tree.change(lambda ledger: ledger.release(key))


async def take_answer(tree: TreeBudget, answered: Any, task_id: str) -> None:
    """A person answered about the spent budget: raise it, or stop the tree."""
    await tree.change(lambda ledger: ledger.answered(answered, task_id))


async def warn_unmetered(
    ctx: StepContext, agent: Agent, tree: TreeBudget, journal: Journal, usage: Usage
) -> None:
    """Say so, once, when a budget holds but the model reports no usage to count."""
    if tree.held and journal.turns == 0 and usage.total_tokens == 0:
        message = (
            f"agent {agent.name!r}: {agent.llm.name!r} reports no token usage, so the "
            "budget cannot count what it spends; ask the endpoint for usage "
            "(stream_options include_usage) or drop the budget"
        )
        log.warning("task %s: %s", ctx.task_id, message)
        await ctx.progress(message=message)


async def when_spent(
    ctx: StepContext,
    agent: Agent,
    journal: Journal,
    tree: TreeBudget,
    spent: Spent,
    answered: Any = None,
) -> NextSteps:
    """The call did not fit: fail, ask a person (saying why), or wait for the task that
    asks."""
    ledger = spent.ledger
    said = f"agent {agent.name!r}: {ledger.spent()}"
    if ledger.stopped:
        raise BudgetExceeded(f"{said}, and a person said to stop")
    if agent.on_budget == "fail":
        raise _failure(ctx, journal, spent, said, _asked(agent, journal))
    again = StepSpec(tool=agent.name, input=to_builtins(AgentStep(turn=journal.turns + 1)))

    def ask(ledger: Ledger) -> Ledger | None:
        free = ledger.asking in (None, ctx.task_id)
        return msgspec.structs.replace(ledger, asking=ctx.task_id) if free else None

    if await tree.change(ask) is not None:
        why = answer_caps.needs(spent, _asked(agent, journal))
        if answered is not None:
            given = msgspec.json.encode(answered).decode()
            why = f"the answer {given} was not enough: {why}"
        gate = StepSpec(tool=agent.name, input=to_builtins(AgentStep(budget=True)))
        return NextSteps(steps=[gate, again], output={"budget": f"{ledger.spent()}; {why}"})
    wait = min(BUDGET_POLL * 1.5**journal.budget_waits, 60.0)  # another task asks
    return NextSteps(steps=[again], output={"budget": f"waiting for {ledger.asking}"}, after=wait)


def _failure(
    ctx: StepContext, journal: Journal, spent: Spent, said: str, asked: int
) -> BudgetExceeded:
    """The error of a spent budget under `on_budget="fail"`, with the way to raise it
    that works for this task (then `tether dlq retry` runs it on from where it failed)."""
    ledger, task = spent.ledger, ctx.task_id
    why = answer_caps.needs(spent, asked)
    retry = f"then retry it ('tether dlq retry {task}'): nothing it did is run again"
    if ledger.tokens is not None and ledger.spent_tokens + spent.tokens > ledger.tokens:
        least = answer_caps.full_limit(spent, asked)
        return TokenBudgetExceeded(
            f"{said}; {why}: raise it ('tether update-agent {task} --budget {least}', or "
            f"client.update_agent({task!r}, token_budget={least})), {retry}"
        )
    if journal.cost_budget is None and ctx.parent is None:
        how = "raise the agent's cost_budget (Agent(..., cost_budget=X)), restart its workers"
        return BudgetExceeded(f"{said}; {why}: {how}, {retry}")
    return BudgetExceeded(
        f"{said}; {why}: a tree's budget in dollars set by its run stays as set: start the "
        "run again with a larger cost_budget (or let a person raise it: on_budget='ask')"
    )


def _asked(agent: Agent, journal: Journal) -> int:
    """What the agent's calls answer with when the budget has room (their settings')."""
    return output_cap({**agent.llm.settings, **journal.settings})


def budget_question(found: Ledger | None, before: list[Entry], agent: Agent) -> NeedsInput:
    """Ask a person to raise the spent budget or stop, saying why (the turn that found it
    spent said what the next call needs, and why an answer was not enough)."""
    told = before[-1].output if before else None
    if isinstance(told, dict) and isinstance(told.get("budget"), str):
        said = told["budget"]
    else:
        said = found.spent() if found is not None else "budget reached"
    return NeedsInput(
        prompt=(
            f'{said}: raise it or stop? {{"tokens": N}} makes the limit N tokens in all '
            "(those spent count), and the call runs with what is left; "
            '{"usd": X} does the same in dollars; {"stop": true} fails the task'
        ),
        schema=BUDGET_ANSWER,
        timeout=agent.budget_timeout,
        default={"stop": True},
    )
