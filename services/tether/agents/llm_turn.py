"""One LLM turn of an agent's task (I/O): read what it was told, call the model within
the tree's budget, and hand the reply to `turns` for what follows.

The budget's protocol (reserve, settle, release, ask) is `spending`'s; the toolbox is
`toolbox`'s; what a reply leads to is pure data (`turns`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import msgspec

from tether import tracing
from tether.agents import answer_caps, calls, spending, unseen_tools
from tether.agents.budget import Price, TreeBudget, cost, price_of, prompt_floor
from tether.agents.conversation import AgentStep, Journal, Turn
from tether.agents.errors import MaxTurnsExceeded, Spent, StructuredOutputsRefused
from tether.agents.models import Reply, complete
from tether.agents.toolbox import toolbox
from tether.agents.turns import Next, Typed, after_reply, guards, result, turn_step
from tether.schemas.codec import to_builtins
from tether.schemas.events import AgentUpdated
from tether.schemas.plans import StepSpec
from tether.schemas.records import Usage
from tether.tools.results import NextSteps

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.tools.context import StepContext

log = logging.getLogger("tether.agents")
Waiting = Callable[[str], Awaitable[None]]


async def take_turn(agent: Agent, ctx: StepContext, journal: Journal, answered: Any) -> Any:
    """One LLM call and what follows it (`answered`: a person's answer about the spent
    budget, given at the step before)."""
    tree = TreeBudget(ctx, await agent.runtime.root(ctx))
    await spending.open_tree(tree, agent, journal)
    steering = await ctx.inbox(journal.inbox_seq)
    if steering:  # told something since the last call: take it first (see conversation)
        limits = [e.token_budget for _, e in steering if isinstance(e, AgentUpdated)]
        await spending.take_limits(tree, [n for n in limits if n], journal)
        taken = [{"seq": seq, "entry": to_builtins(entry)} for seq, entry in steering]
        again = turn_step(agent.name, journal.turns + 1)
        return NextSteps(steps=[again], output={"inbox": taken})
    if answered is not None:
        await spending.take_answer(tree, answered, ctx.task_id)
    _check_limits(agent, journal)
    shapes, specs = await toolbox(agent, ctx)

    async def waiting(message: str) -> None:
        log.info("task %s: %s", ctx.task_id, message)
        await ctx.progress(message=message)

    typed = _typed(agent, journal)
    try:
        reply = await _call(agent, ctx, journal, specs, typed, waiting, tree)
    except Spent as spent:
        return await spending.when_spent(ctx, agent, journal, tree, spent, answered)
    except StructuredOutputsRefused:
        if typed is None or typed.tool or agent.llm.structured_outputs is not None:
            raise
        log.info(
            "task %s: %s refuses json_schema: asking for a final_answer call instead",
            ctx.task_id,
            agent.llm.name,
        )
        agent.runtime.no_json_schema.add(agent.llm)
        typed = _typed(agent, journal)
        reply = await _call(agent, ctx, journal, specs, typed, waiting, tree)
    ctx.add_usage(reply.usage)
    await spending.warn_unmetered(ctx, agent, tree, journal, reply.usage)
    if specs and journal.turns == 0:  # said once: on the first call, where tools are offered
        await _say_unseen(agent, ctx, _options(agent, journal, typed), reply)
    next_ = after_reply(agent.name, journal.turns + 1, reply.message, shapes, typed, journal.start)
    return result(await _after_answer(agent, ctx, journal, reply, next_))


async def _after_answer(
    agent: Agent, ctx: StepContext, journal: Journal, reply: Reply, next_: Next
) -> Next:
    """An answer is the result, unless the agent was told something while it answered
    (then it answers again), or output guardrails check it first."""
    if next_.steps:
        return next_
    if await ctx.inbox(journal.inbox_seq):
        # The answer stays in the conversation; the next turn reads what it was told.
        told = Turn(message=reply.message, run=[])
        return Next(output=to_builtins(told), steps=[turn_step(agent.name, journal.turns + 2)])
    if agent.output_checks:
        finish = StepSpec(tool=agent.name, input=to_builtins(AgentStep(finish=True)))
        checks = guards(agent.output_checks, next_.output)
        return Next(output={"answer": next_.output}, steps=[checks, finish])
    return next_


async def _say_unseen(
    agent: Agent, ctx: StepContext, options: dict[str, Any], reply: Reply
) -> None:
    """Note it in the task's status when the model could not have seen its tools."""
    base_url = agent.llm.base_url or os.environ.get("OPENAI_BASE_URL")
    takes = await unseen_tools.takes_tools(base_url, agent.runtime.takes_tools)
    said = unseen_tools.unseen(agent, takes, options, reply)
    if said is not None:
        log.warning("task %s: %s", ctx.task_id, said)
        ctx.note(said)


def _check_limits(agent: Agent, journal: Journal) -> None:
    """Stop before a call past `max_turns`."""
    if journal.turns >= agent.max_turns:
        raise MaxTurnsExceeded(
            f"agent {agent.name!r} did not answer within {agent.max_turns} turns: raise "
            "max_turns (Agent(..., max_turns=N)), restart its workers, then retry "
            "the task ('tether dlq retry ID'): its turns so far are kept, none is sent again"
        )


def _typed(agent: Agent, journal: Journal) -> Typed | None:
    if agent.output is None:
        return None
    model = agent.llm
    tool = model.structured_outputs is False or model in agent.runtime.no_json_schema
    return Typed(agent.output, tool, journal.wrong_answers, agent.output_retries)


def _options(agent: Agent, journal: Journal, typed: Typed | None) -> dict[str, Any]:
    """This call's request options: the run's settings, the tool choice, the answer's
    format."""
    options: dict[str, Any] = dict(journal.settings)
    if agent.tool_choice is not None and (journal.turns == 0 or not agent.reset_tool_choice):
        options["tool_choice"] = agent.tool_choice
    if typed is not None and typed.tool:
        options["tool_choice"] = "required"
    elif typed is not None:
        options["response_format"] = typed.output.response_format()
    return options


async def _call(
    agent: Agent,
    ctx: StepContext,
    journal: Journal,
    specs: list[dict[str, Any]],
    typed: Typed | None,
    waiting: Waiting,
    tree: TreeBudget,
) -> Reply:
    """The model's reply, what it may spend held in the tree's budget while it runs."""
    options = _options(agent, journal, typed)
    if typed is not None and typed.tool:
        specs = [*specs, typed.output.final_tool()]
    # An update may name another model on the same endpoint (and client).
    model = agent.llm if journal.model is None else replace(agent.llm, name=journal.model)
    price = price_of(model.name, agent.llm.price)
    key = ctx.idempotency_key
    follow = spending.defaults_followed(agent, ctx, journal)
    call = (journal.messages, specs, options)
    floor = prompt_floor(journal.reported, journal.messages)
    cap = await spending.reserve(agent, tree, key, price, call, follow, floor)
    if cap is not None:  # the most the budget holds for it: the call cannot answer more
        options = answer_caps.capped(agent.llm, options, cap)
    left = await calls.begin(ctx, model.name)  # a call an earlier attempt died in
    if left is not None:
        ctx.add_usage(left)
    streamed = calls.Streamed(ctx.stream)
    try:
        with tracing.chat_span(model.name, ctx.task_id) as span:
            async with agent.runtime.using(agent.llm) as client:
                messages = journal.messages
                reply = await complete(client, model, messages, specs, streamed, waiting, options)
            tracing.chat_reply(span, reply.usage, reply.finish_reason, reply.message)
    except asyncio.CancelledError:  # cancelled or timed out mid-call: what it streamed counts
        ctx.add_usage(_priced(calls.cut_off(model.name, streamed.chars), price))
        raise
    except Exception:
        await spending.release(tree, key)
        raise
    finally:
        await calls.end(ctx)
    reply = replace(reply, usage=_priced(reply.usage, price))
    await spending.settle(tree, key, reply.usage)
    return reply


def _priced(usage: Usage, price: Price | None) -> Usage:
    """`usage` with its cost, where its model has a price."""
    return usage if price is None else msgspec.structs.replace(usage, cost_usd=cost(usage, price))
