"""`Agent`: an LLM tool-calling loop whose every turn and tool call is a durable step.

An agent is served as a tool named after it. Each of its steps is one LLM turn (or an
approval gate); the tool calls of a reply run as a parallel group on whatever workers
serve those tools, in any language, and fan in to the next turn. A crash re-runs only
the call in flight; a checkpointed turn or tool call never runs again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from tether import tracing
from tether.agents import spending
from tether.agents.budget import TreeBudget, cost, price_of
from tether.agents.conversation import (
    AgentStep,
    Entry,
    Journal,
    McpCall,
    Turn,
    as_step,
    calls_of,
    rebuild,
)
from tether.agents.models import OpenAIModel, Reply, StructuredOutputsRefused, complete
from tether.agents.output import OutputType
from tether.agents.runtime import Runtime
from tether.agents.schemas import function_tool
from tether.agents.spending import Spent
from tether.agents.spending import TokenBudgetExceeded as TokenBudgetExceeded
from tether.agents.turns import (
    Next,
    ToolShape,
    Typed,
    after_approval,
    after_reply,
    approval_prompt,
    approval_schema,
)
from tether.errors import RetryableError, TerminalError
from tether.schemas.codec import to_builtins
from tether.schemas.events import AgentUpdated
from tether.schemas.tasks import StepSpec
from tether.worker.context import StepContext
from tether.worker.results import Child, NeedsInput, NextSteps
from tether.worker.retry import RetryPolicy

if TYPE_CHECKING:
    pass

log = logging.getLogger("tether.agents")
AGENT_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "The question or task for the agent."},
        "after": {
            "type": "string",
            "description": "A follow-up: the id of a completed task of this agent, whose "
            "conversation comes first.",
        },
        "token_budget": {
            "type": "integer",
            "minimum": 1,
            "description": "Tokens the task and those below it may spend (at most the agent's).",
        },
        "cost_budget": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Dollars the task and those below it may spend (at most the agent's).",
        },
        "instructions": {"type": "string", "description": "This run's instructions."},
        "settings": {"type": "object", "description": "This run's model settings."},
    },
    "required": ["input"],
}


def agent_input_schema(token_budget: int | None, cost_budget: float | None) -> dict[str, Any]:
    """What a run of an agent takes: a run may ask for less than its budgets, not more."""
    properties = dict(AGENT_INPUT_SCHEMA["properties"])
    for name, ceiling in (("token_budget", token_budget), ("cost_budget", cost_budget)):
        if ceiling is not None:
            properties[name] = {**properties[name], "maximum": ceiling}
    return {**AGENT_INPUT_SCHEMA, "properties": properties}


SUB_AGENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": AGENT_INPUT_SCHEMA["properties"]["input"]},
    "required": ["input"],
}
"""What a model sees of an agent it may call: a question (it runs as a child task)."""
LLM_RETRY = RetryPolicy(max_attempts=8, initial_backoff=1, max_backoff=60)
"""Rate limits and overloaded providers pass; eight attempts over about two minutes."""


class MaxTurnsExceeded(TerminalError):
    """The agent did not answer within `max_turns` LLM turns."""


@dataclass(frozen=True)
class Agent:
    """An agent: a model, its instructions and the Tether tools it may call.

    Create one with `App.agent(...)`; submit with `client.submit_agent(name, input)`.
    """

    name: str
    model: OpenAIModel
    instructions: str = ""
    tools: tuple[str, ...] = ()
    max_turns: int = 20
    token_budget: int | None = None
    """Input plus output tokens the task and every task below it (sub-agents) may spend;
    each LLM call reserves its worst case first, and none starts that does not fit."""
    cost_budget: float | None = None
    """The same in dollars, from the model's price (`agents.budget.PRICES`)."""
    on_budget: Literal["ask", "fail"] = "ask"
    """When the budget is spent: ask a person to raise it (the task waits), or fail."""
    budget_timeout: timedelta | None = None
    """Unanswered this long, a question about the budget stops the run."""
    approval: frozenset[str] = frozenset()
    """Tools whose calls wait for a person's approval (besides those registered with
    `approval=True`)."""
    approval_timeout: timedelta | None = None
    """Unanswered this long, an approval fails the task (`InputExpired`), or denies the
    calls it asked for (`approval_timeout_denies`)."""
    approval_timeout_denies: bool = False
    output: OutputType | None = None
    """The type of the final answer (None: text)."""
    output_retries: int = 2
    """Wrong typed answers told to the model before the task fails (`InvalidOutput`)."""
    tool_choice: str | dict[str, Any] | None = None
    """`tool_choice` of the first LLM call ("required", a function, ...)."""
    reset_tool_choice: bool = True
    """After the first call, leave the choice to the model (a forced call would loop)."""
    input_guardrails: tuple[str, ...] = ()
    """Tools that check the question before the first turn (raise GuardrailTripped)."""
    output_guardrails: tuple[str, ...] = ()
    """Tools that check the final answer before it is the result."""
    mcp_servers: tuple[str, ...] = ()
    """MCP servers (streamable HTTP URLs) whose tools the model is offered."""
    handoffs: tuple[str, ...] = ()
    """Agents the model may hand the conversation over to (`transfer_to_<agent>`)."""
    _runtime: Runtime = field(default_factory=lambda: Runtime(), compare=False, repr=False)

    async def aclose(self) -> None:
        """Close the model clients this process made (a later step makes them again)."""
        await self._runtime.aclose()

    async def run_step(self, ctx: StepContext, data: Any) -> Any:
        """The tool function: one LLM turn, or an approval gate, of this agent's task."""
        role = as_step(data)
        spending.check_ceiling(self, role)
        if role.mcp is not None:
            return await self._call_mcp(ctx, role.mcp)
        if ctx.branch is not None and role.input is not None:
            # Called by another agent (or in a plan's parallel step): run as a task of its
            # own, whose turns and tool calls are steps like any other, linked as a child.
            return Child([StepSpec(tool=self.name, input=data)])
        if role.input is not None and self.input_guardrails:
            steps = [self._guards(self.input_guardrails, role.input), self._turn_step(1)]
            return NextSteps(steps=steps, output={"guarded": "input"})
        journal, before = await self._journal(ctx, role)
        if role.budget:
            found = await TreeBudget(ctx, await self._runtime.root(ctx)).read()
            return spending.budget_question(found[0] if found else None, before, self)
        if role.finish:
            return _guarded_answer(before)
        if role.approve is not None:
            return await self._gate(ctx, journal, role.approve)
        if role.dispatch is not None:
            return await self._dispatch(ctx, journal, role.dispatch)
        answered = before[-1].output if before and as_step(before[-1].spec.input).budget else None
        return await self._turn(ctx, journal, answered)

    async def _turn(self, ctx: StepContext, journal: Journal, answered: Any = None) -> Any:
        tree = TreeBudget(ctx, await self._runtime.root(ctx))
        await spending.open_tree(tree, self, journal)
        steering = await ctx.inbox(journal.inbox_seq)
        if steering:  # told something since the last call: take it first (see conversation)
            limits = [e.token_budget for _, e in steering if isinstance(e, AgentUpdated)]
            await spending.take_limits(tree, [n for n in limits if n], journal)
            taken = [{"seq": seq, "entry": to_builtins(entry)} for seq, entry in steering]
            return NextSteps(steps=[self._turn_step(journal.turns + 1)], output={"inbox": taken})
        if answered is not None:  # a person answered about the spent budget
            await tree.change(lambda ledger: ledger.answered(answered, ctx.task_id))
        self._check_limits(journal)
        shapes, specs = await self._tools(ctx)

        async def waiting(message: str) -> None:
            log.info("task %s: %s", ctx.task_id, message)
            await ctx.progress(message=message)

        typed = self._typed(journal)
        try:
            reply = await self._call(ctx, journal, specs, typed, waiting, tree)
        except Spent as spent:
            return await spending.when_spent(ctx, self, journal, tree, spent, answered)
        except StructuredOutputsRefused:
            if typed is None or typed.tool or self.model.structured_outputs is not None:
                raise
            log.info(
                "task %s: %s refuses json_schema: asking for a final_answer call instead",
                ctx.task_id,
                self.model.name,
            )
            self._runtime.no_json_schema.add(self.model)
            typed = self._typed(journal)
            reply = await self._call(ctx, journal, specs, typed, waiting, tree)
        ctx.add_usage(reply.usage)
        if tree.held and journal.turns == 0 and reply.usage.total_tokens == 0:
            message = (
                f"agent {self.name!r}: {self.model.name!r} reports no token usage, so the "
                "budget cannot count what it spends; ask the endpoint for usage "
                "(stream_options include_usage) or drop the budget"
            )
            log.warning("task %s: %s", ctx.task_id, message)
            await ctx.progress(message=message)
        turn = journal.turns + 1
        next_ = after_reply(self.name, turn, reply.message, shapes, typed, journal.start)
        if not next_.steps and await ctx.inbox(journal.inbox_seq):
            # Told something while it answered: the answer stays in the conversation, and
            # the next turn reads what it was told and answers again.
            told = Turn(message=reply.message, run=[])
            next_ = Next(output=to_builtins(told), steps=[self._turn_step(journal.turns + 2)])
        elif not next_.steps and self.output_guardrails:
            finish = StepSpec(tool=self.name, input=to_builtins(AgentStep(finish=True)))
            guards = self._guards(self.output_guardrails, next_.output)
            next_ = Next(output={"answer": next_.output}, steps=[guards, finish])
        return _result(next_)

    def _guards(self, names: tuple[str, ...], value: Any) -> StepSpec:
        """The guardrails as one parallel step: any that trips fails the task."""
        return StepSpec(parallel=[StepSpec(tool=name, input=value) for name in names])

    def _turn_step(self, turn: int) -> StepSpec:
        return StepSpec(tool=self.name, input=to_builtins(AgentStep(turn=turn)))

    def _check_limits(self, journal: Journal) -> None:
        """Stop before a call past `max_turns`."""
        if journal.turns >= self.max_turns:
            raise MaxTurnsExceeded(
                f"agent {self.name!r} did not answer within {self.max_turns} turns: raise "
                "max_turns (app.agent(..., max_turns=N)), restart its workers, then retry "
                "the task ('tether dlq retry ID'): its turns so far are kept, none is sent again"
            )

    def _typed(self, journal: Journal) -> Typed | None:
        if self.output is None:
            return None
        tool = self.model.structured_outputs is False or self.model in self._runtime.no_json_schema
        return Typed(self.output, tool, journal.wrong_answers, self.output_retries)

    async def _call(
        self,
        ctx: StepContext,
        journal: Journal,
        specs: list[dict[str, Any]],
        typed: Typed | None,
        waiting: Callable[[str], Awaitable[None]],
        tree: TreeBudget,
    ) -> Reply:
        options: dict[str, Any] = dict(journal.settings)
        if self.tool_choice is not None and (journal.turns == 0 or not self.reset_tool_choice):
            options["tool_choice"] = self.tool_choice
        if typed is not None and typed.tool:
            specs = [*specs, typed.output.final_tool()]
            options["tool_choice"] = "required"
        elif typed is not None:
            options["response_format"] = typed.output.response_format()
        # An update may name another model on the same endpoint (and client).
        model = self.model if journal.model is None else replace(self.model, name=journal.model)
        price = price_of(model.name, self.model.price)
        key = ctx.idempotency_key
        follow = spending.defaults_followed(self, ctx, journal)
        await spending.reserve(self, tree, key, price, (journal.messages, specs, options), follow)
        try:
            with tracing.chat_span(model.name, ctx.task_id) as span:
                async with self._runtime.using(self.model) as client:
                    messages = journal.messages
                    reply = await complete(
                        client, model, messages, specs, ctx.stream, waiting, options
                    )
                tracing.chat_reply(span, reply.usage, reply.finish_reason, reply.message)
        except Exception:
            if tree.held:
                await tree.change(lambda ledger: ledger.release(key))
            raise
        if price is not None:
            usage = msgspec.structs.replace(reply.usage, cost_usd=cost(reply.usage, price))
            reply = replace(reply, usage=usage)
        if tree.held:
            spent = reply.usage
            await tree.change(lambda ledger: ledger.settle(key, spent.total_tokens, spent.cost_usd))
        return reply

    async def _gate(self, ctx: StepContext, journal: Journal, pending: list[str]) -> NeedsInput:
        """Ask a person about the calls in `pending` (each on its own, or all at once)."""
        denial = {"approved": False, "reason": "no answer came in time"}
        turn = _pending(journal)
        _, specs = await self._tools(ctx)
        schemas = {spec["function"]["name"]: spec["function"]["parameters"] for spec in specs}
        calls = {c.id: schemas[c.name] for c in calls_of(turn.message) if c.name in schemas}
        return NeedsInput(
            prompt=approval_prompt(turn, pending),
            schema=approval_schema(pending, {c: calls[c] for c in pending if c in calls}),
            timeout=self.approval_timeout,
            default=denial if self.approval_timeout_denies else msgspec.UNSET,
        )

    async def _dispatch(self, ctx: StepContext, journal: Journal, turn: int) -> Any:
        """After approval gates: ask again about undecided calls, or run the approved."""
        shapes, _ = await self._tools(ctx)
        answers = journal.answers
        return _result(after_approval(self.name, turn, _pending(journal), answers, shapes))

    async def _call_mcp(self, ctx: StepContext, call: McpCall) -> str:
        from tether.agents.mcp_tools import call_tool  # the `mcp` client: only when used

        if call.server not in self.mcp_servers:  # a step's input names a server: only ours
            raise TerminalError(
                f"agent {self.name!r} has no MCP server {call.server!r} (its servers: "
                f"{', '.join(self.mcp_servers) or 'none'})"
            )
        return await call_tool(ctx, call)

    async def _journal(self, ctx: StepContext, role: AgentStep) -> tuple[Journal, list[Entry]]:
        """The conversation so far, and the steps before this one."""
        if role.input is not None:  # the first turn: nothing before it is the agent's
            earlier = await self._runtime.thread(ctx, role.after)
            journal = rebuild(self.instructions, role, [], earlier)
            return msgspec.structs.replace(journal, start=ctx.step), []
        entries = await self._runtime.history(ctx)
        start = role.handoff if role.handoff is not None else self._start_of(entries)
        if start is None or not 0 <= start < len(entries):
            raise TerminalError(f"step {ctx.step} of agent {self.name!r} has no first turn")
        first = entries[start].spec.input
        if first is None and start > 0:  # the question was the previous step's output
            first = entries[start - 1].output
        opening = as_step(first)
        earlier = await self._runtime.thread(ctx, opening.after)
        journal = rebuild(self.instructions, opening, entries[start:], earlier)
        return msgspec.structs.replace(journal, start=start), entries

    def _start_of(self, entries: list[Entry]) -> int | None:
        """The latest first turn of this agent, or of the conversation handed over to it
        (a plan may ask the same agent twice)."""
        for index in range(len(entries) - 1, -1, -1):
            spec = entries[index].spec
            if spec.tool != self.name:
                continue
            step = as_step(spec.input)
            if step.handoff is not None:
                return step.handoff
            if not step.continues:
                return index
        return None

    async def _tools(self, ctx: StepContext) -> tuple[dict[str, ToolShape], list[dict[str, Any]]]:
        shapes: dict[str, ToolShape] = {}
        specs: list[dict[str, Any]] = []
        for name in self.tools:
            info = await self._runtime.tool_info(ctx, name)
            if info is None:
                raise RetryableError(
                    f"agent {self.name!r}: tool {name!r} is not registered yet; start a "
                    "worker that serves it"
                )
            if info.agent:  # a sub-agent: the model gives it a question, nothing else
                info = msgspec.structs.replace(info, input_schema=SUB_AGENT_SCHEMA)
            spec, wrapped = function_tool(info)
            shapes[name] = ToolShape(
                wrapped=wrapped, approval=info.approval or name in self.approval
            )
            specs.append(spec)
        for target in self.handoffs:
            info = await self._runtime.tool_info(ctx, target)
            if info is None or not info.agent:
                raise RetryableError(
                    f"agent {self.name!r} hands over to {target!r}, which no worker serves "
                    "as an agent yet: start one that does (or take it out of handoffs)"
                )
            name = f"transfer_to_{target}"
            shapes[name] = ToolShape(handoff=target)
            about = f"Hand the conversation over to the agent {target!r}: {info.description}"
            no_arguments = {"type": "object", "properties": {}}
            specs.append(
                {
                    "type": "function",
                    "function": {"name": name, "description": about, "parameters": no_arguments},
                }
            )
        for tool in await self._runtime.mcp_tools(self.mcp_servers):
            if tool.name in shapes:
                raise TerminalError(
                    f"agent {self.name!r}: two tools are named {tool.name!r} (one from the "
                    f"MCP server {tool.server}): a model cannot tell them apart; take one "
                    "out of its tools or mcp_servers"
                )
            approval = tool.name in self.approval
            shapes[tool.name] = ToolShape(approval=approval, mcp_server=tool.server, safe=tool.safe)
            specs.append(tool.function())
        return shapes, specs


def _guarded_answer(before: list[Entry]) -> Any:
    """The answer the output guardrails passed: the latest `{"answer": ...}` output."""
    for entry in reversed(before):
        if isinstance(entry.output, dict) and set(entry.output) == {"answer"}:
            return entry.output["answer"]
    raise TerminalError("a finish step found no answer before it")


def _pending(journal: Journal) -> Turn:
    if journal.last_turn is None:
        raise TerminalError("an approval step found no tool calls waiting for it")
    return journal.last_turn


def _result(next_: Next) -> Any:
    return NextSteps(steps=next_.steps, output=next_.output) if next_.steps else next_.output
