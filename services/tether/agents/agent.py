"""`Agent`: an LLM tool-calling loop whose every turn and tool call is a durable step.

An agent is one definition (`Agent(name, model=..., tools=[...])`) and a tool the app
adds (`app.add(agent)`: `as_tool()`). Its class is the router of its steps: each step is
one LLM turn (`llm_turn`), an approval gate, a guardrail's finish or a call of an MCP
tool; the tool calls of a reply run as a parallel group on whatever workers serve those
tools, in any language, and fan in to the next turn. A crash re-runs only the call in
flight; a checkpointed turn or tool call never runs again.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import msgspec

from tether.agents import spending
from tether.agents.budget import TreeBudget
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
from tether.agents.errors import MaxTurnsExceeded as MaxTurnsExceeded
from tether.agents.errors import TokenBudgetExceeded as TokenBudgetExceeded
from tether.agents.llm_turn import take_turn
from tether.agents.models import OpenAIModel
from tether.agents.output import OutputType
from tether.agents.output import output_type as typed_output
from tether.agents.runtime import Runtime
from tether.agents.toolbox import toolbox
from tether.agents.turns import (
    after_approval,
    approval_prompt,
    approval_schema,
    guards,
    result,
    turn_step,
)
from tether.errors import TerminalError
from tether.schemas.builds import Versioning
from tether.schemas.ids import validate_tool_name
from tether.schemas.plans import StepSpec
from tether.tools.context import StepContext
from tether.tools.results import Child, NeedsInput, NextSteps
from tether.tools.retry import RetryPolicy
from tether.tools.tool import Tool, ToolFunction, names, seconds

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


LLM_RETRY = RetryPolicy(max_attempts=8, initial_backoff=1, max_backoff=60)
"""Rate limits and overloaded providers pass; eight attempts over about two minutes."""


@dataclass(frozen=True)
class Agent:
    """An agent: a model, its instructions and the Tether tools it may call.

    ```python
    researcher = app.add(Agent(
        "researcher",
        model="gpt-4o-mini",  # or OpenAIModel("llama3.1", base_url="http://localhost:11434/v1")
        instructions="Answer with sources.",
        tools=["search", "fetch_page"],
    ))
    ```

    Served as the tool `name`; submit with `client.submit_agent(name, input)`. Each LLM
    turn is a durable step, each tool call a branch of a parallel step, so a crash re-runs
    only what was in flight. `tools` name Tether tools, served by any worker in any
    language (their JSON Schemas come from the registry); an agent among them is a
    sub-agent, each call a child task of its own.
    """

    name: str
    model: str | OpenAIModel
    """A model name (`OpenAIModel(name)`: `OPENAI_BASE_URL`, `OPENAI_API_KEY`) or a model."""
    instructions: str = ""
    tools: Sequence[str | ToolFunction] = ()
    max_turns: int = 20
    token_budget: int | None = None
    """Input plus output tokens the task and every task below it (sub-agents) may spend;
    each LLM call reserves its worst case first, and none starts that does not fit."""
    cost_budget: float | None = None
    """The same in dollars, from the model's price (`agents.budget.PRICES`)."""
    on_budget: Literal["ask", "fail"] = "ask"
    """When a call does not fit the budget: ask a person to raise it or stop (the task
    waits), or fail."""
    budget_timeout: timedelta | float | None = None
    """Unanswered this long, a question about the budget stops the run."""
    approval: Sequence[str | ToolFunction] = ()
    """Tools whose calls wait for a person's approval (besides those registered with
    `approval=True`). When a reply asks for several gated calls, the others run at once
    and the task waits for an answer per call (`{"call_id": ..., "approved": ...,
    "arguments"?: ...}`) or one for all."""
    approval_timeout: timedelta | float | None = None
    """Unanswered this long, an approval fails the task (`InputExpired`), or denies the
    calls it asked for (`approval_timeout_denies`)."""
    approval_timeout_denies: bool = False
    output_type: Any = None
    """The type of the final answer (a msgspec Struct, a dataclass or a JSON Schema;
    None: text): asked for and checked as that type."""
    output_retries: int = 2
    """Wrong typed answers told back to the model before the task fails (`InvalidOutput`)."""
    input_guardrails: Sequence[str | ToolFunction] = ()
    """Tools (or plain functions, registered as tools by `App.add`) that check the
    question before the first turn, as a step of their own; one that raises
    `GuardrailTripped(reason)` fails the task with it."""
    output_guardrails: Sequence[str | ToolFunction] = ()
    """The same for the final answer, before it is the result."""
    tool_choice: str | dict[str, Any] | None = None
    """`tool_choice` of the first LLM call ("required", a function, ...)."""
    reset_tool_choice: bool = True
    """After the first call, leave the choice to the model (a forced call would loop)."""
    mcp_servers: Sequence[str] = ()
    """MCP servers (streamable HTTP URLs) whose tools the model is offered, each call a
    branch like any other; after a crash mid-call, a call is made again only when the
    tool says that is safe (`readOnlyHint`, `idempotentHint`), and a server that runs
    calls as tasks (MCP tasks) is polled instead of called twice."""
    handoffs: Sequence[str] = ()
    """Agents the model may hand the conversation over to (`transfer_to_<agent>`), which
    take it from the next turn on, under their own instructions and tools, in the same
    task (a sub-agent answers one question in a task of its own instead)."""
    description: str | None = None
    retry: RetryPolicy | None = None
    """How a failed turn is retried (default `LLM_RETRY`)."""
    versioning: Versioning | None = None
    """`pinned`: every turn of a conversation runs on the build that started it, so it
    keeps its instructions, tools and model through a deploy (default: the app's)."""
    llm: OpenAIModel = field(init=False, repr=False, compare=False)
    """`model`, made an `OpenAIModel` once (its clients are kept by identity)."""
    output: OutputType | None = field(init=False, repr=False, compare=False)
    """`output_type`, made the schema asked for and the check of the answer."""
    runtime: Runtime = field(init=False, repr=False, compare=False, default_factory=Runtime)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"agent {self.name!r}: max_turns must be at least 1")
        if self.output_retries < 0:
            raise ValueError(f"agent {self.name!r}: output_retries must be 0 or more")
        validate_tool_name(self.name)
        for sequence in ("tools", "approval", "input_guardrails", "output_guardrails"):
            object.__setattr__(self, sequence, tuple(getattr(self, sequence)))
        object.__setattr__(self, "mcp_servers", tuple(self.mcp_servers))
        object.__setattr__(self, "handoffs", tuple(self.handoffs))
        object.__setattr__(self, "budget_timeout", seconds(self.budget_timeout))
        object.__setattr__(self, "approval_timeout", seconds(self.approval_timeout))
        model = OpenAIModel(self.model) if isinstance(self.model, str) else self.model
        object.__setattr__(self, "llm", model)
        output = None if self.output_type is None else typed_output(self.output_type)
        object.__setattr__(self, "output", output)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return names(self.tools)

    @property
    def approval_names(self) -> frozenset[str]:
        return frozenset(names(self.approval))

    @property
    def input_checks(self) -> tuple[str, ...]:
        return names(self.input_guardrails)

    @property
    def output_checks(self) -> tuple[str, ...]:
        return names(self.output_guardrails)

    def as_tool(self) -> Tool:
        """The agent as the tool `name`, whose steps `run_step` routes."""
        if self.mcp_servers:  # the `mcp` client takes seconds to import: now, not mid-step
            importlib.import_module("tether.agents.mcp_tools")
        checks = (*self.input_guardrails, *self.output_guardrails)
        return Tool(
            name=self.name,
            function=self.run_step,
            description=self.description
            or f"Agent {self.name!r} on {self.llm.name}: {self.instructions}",
            retry=self.retry or LLM_RETRY,
            max_concurrency=self.llm.max_concurrency,
            schema=agent_input_schema(self.token_budget, self.cost_budget),
            output_schema=None if self.output is None else self.output.schema,
            agent=True,
            calls=(*self.tool_names, *self.input_checks, *self.output_checks, *self.handoffs),
            helpers=tuple(check for check in checks if not isinstance(check, str)),
            close=self.aclose,
            versioning=self.versioning,
        )

    async def aclose(self) -> None:
        """Close the model clients this process made (a later step makes them again)."""
        await self.runtime.aclose()

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
        if role.input is not None and self.input_checks:
            steps = [guards(self.input_checks, role.input), turn_step(self.name, 1)]
            return NextSteps(steps=steps, output={"guarded": "input"})
        journal, before = await self._journal(ctx, role)
        if role.budget:
            found = await TreeBudget(ctx, await self.runtime.root(ctx)).read()
            return spending.budget_question(found[0] if found else None, before, self)
        if role.finish:
            return _guarded_answer(before)
        if role.approve is not None:
            return await self._gate(ctx, journal, role.approve)
        if role.dispatch is not None:
            return await self._dispatch(ctx, journal, role.dispatch)
        answered = before[-1].output if before and as_step(before[-1].spec.input).budget else None
        return await take_turn(self, ctx, journal, answered)

    async def _gate(self, ctx: StepContext, journal: Journal, pending: list[str]) -> NeedsInput:
        """Ask a person about the calls in `pending` (each on its own, or all at once)."""
        denial = {"approved": False, "reason": "no answer came in time"}
        turn = _pending(journal)
        _, specs = await toolbox(self, ctx)
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
        shapes, _ = await toolbox(self, ctx)
        answers = journal.answers
        return result(after_approval(self.name, turn, _pending(journal), answers, shapes))

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
            earlier = await self.runtime.thread(ctx, role.after)
            journal = rebuild(self.instructions, role, [], earlier)
            return msgspec.structs.replace(journal, start=ctx.step), []
        entries = await self.runtime.history(ctx)
        start = role.handoff if role.handoff is not None else self._start_of(entries)
        if start is None or not 0 <= start < len(entries):
            raise TerminalError(f"step {ctx.step} of agent {self.name!r} has no first turn")
        first = entries[start].spec.input
        if first is None and start > 0:  # the question was the previous step's output
            first = entries[start - 1].output
        opening = as_step(first)
        earlier = await self.runtime.thread(ctx, opening.after)
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
