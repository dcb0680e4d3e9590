"""`Agent`: an LLM tool-calling loop whose every turn and tool call is a durable step.

An agent is served as a tool named after it. Each of its steps is one LLM turn (or an
approval gate); the tool calls of a reply run as a parallel group on whatever workers
serve those tools, in any language, and fan in to the next turn. A crash re-runs only
the call in flight; a checkpointed turn or tool call never runs again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec
import openai

from tether import tracing
from tether.agents.conversation import (
    AgentStep,
    Entry,
    Journal,
    McpCall,
    Turn,
    as_step,
    rebuild,
)
from tether.agents.models import OpenAIModel, Reply, StructuredOutputsRefused, complete
from tether.agents.output import OutputType
from tether.agents.schemas import function_tool
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
from tether.schemas.tasks import Checkpoint, StepSpec, TaskRecord, TaskStatus, ToolInfo
from tether.worker.context import StepContext
from tether.worker.results import Child, NeedsInput, NextSteps
from tether.worker.retry import RetryPolicy

if TYPE_CHECKING:
    from tether.agents.mcp_tools import McpTool

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
        "token_budget": {"type": "integer", "minimum": 1, "description": "Stop past this."},
        "instructions": {"type": "string", "description": "This run's instructions."},
        "settings": {"type": "object", "description": "This run's model settings."},
    },
    "required": ["input"],
}
SUB_AGENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": AGENT_INPUT_SCHEMA["properties"]["input"]},
    "required": ["input"],
}
"""What a model sees of an agent it may call: a question (it runs as a child task)."""
LLM_RETRY = RetryPolicy(max_attempts=8, initial_backoff=1, max_backoff=60)
"""Rate limits and overloaded providers pass; eight attempts over about two minutes."""
HISTORY_CACHE = 256
"""Conversations a worker process keeps, so its next turn reads only new checkpoints."""
TOOL_INFO_AGE = 10.0
MAX_THREAD = 10_000
"""Follow-ups one conversation may chain (a guard against a cycle of reused task ids)."""


class MaxTurnsExceeded(TerminalError):
    """The agent did not answer within `max_turns` LLM turns."""


class TokenBudgetExceeded(TerminalError):
    """The task spent its token budget before the agent answered."""


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
    """Input plus output tokens one task may spend; the loop stops past it."""
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
    _runtime: _Runtime = field(default_factory=lambda: _Runtime(), compare=False, repr=False)

    async def aclose(self) -> None:
        """Close the model clients this process made (a later step makes them again)."""
        await self._runtime.aclose()

    async def run_step(self, ctx: StepContext, data: Any) -> Any:
        """The tool function: one LLM turn, or an approval gate, of this agent's task."""
        role = as_step(data)
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
        if role.finish:
            return _guarded_answer(before)
        if role.approve is not None:
            return self._gate(journal, role.approve)
        if role.dispatch is not None:
            return await self._dispatch(ctx, journal, role.dispatch)
        return await self._turn(ctx, journal)

    async def _turn(self, ctx: StepContext, journal: Journal) -> Any:
        steering = await ctx.inbox(journal.inbox_seq)
        if steering:  # told something since the last call: take it first (see conversation)
            taken = [{"seq": seq, "entry": to_builtins(entry)} for seq, entry in steering]
            return NextSteps(steps=[self._turn_step(journal.turns + 1)], output={"inbox": taken})
        budget = self._check_limits(journal)
        shapes, specs = await self._tools(ctx)

        async def waiting(message: str) -> None:
            log.info("task %s: %s", ctx.task_id, message)
            await ctx.progress(message=message)

        typed = self._typed(journal)
        try:
            reply = await self._call(ctx, journal, specs, typed, waiting)
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
            reply = await self._call(ctx, journal, specs, typed, waiting)
        ctx.add_usage(reply.usage)
        if budget is not None and journal.turns == 0 and reply.usage.total_tokens == 0:
            message = (
                f"agent {self.name!r}: {self.model.name!r} reports no token usage, so the "
                f"token budget of {budget:,} cannot stop this task; ask the endpoint for "
                "usage (stream_options include_usage) or drop the budget"
            )
            log.warning("task %s: %s", ctx.task_id, message)
            await ctx.progress(message=message)
        next_ = after_reply(self.name, journal.turns + 1, reply.message, shapes, typed)
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

    def _check_limits(self, journal: Journal) -> int | None:
        """Stop before a call past `max_turns` or the token budget; the budget."""
        if journal.turns >= self.max_turns:
            raise MaxTurnsExceeded(
                f"agent {self.name!r} did not answer within {self.max_turns} turns: raise "
                "max_turns (app.agent(..., max_turns=N)), restart its workers, then retry "
                "the task ('tether dlq retry ID'): its turns so far are kept, none is sent again"
            )
        budget = journal.token_budget or self.token_budget
        if budget is not None and journal.usage.total_tokens >= budget:
            raise TokenBudgetExceeded(
                f"agent {self.name!r} spent {journal.usage.total_tokens:,} tokens of its "
                f"budget of {budget:,} before answering"
            )
        return budget

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
        with tracing.chat_span(model.name, ctx.task_id) as span:
            async with self._runtime.using(self.model) as client:
                messages = journal.messages
                reply = await complete(client, model, messages, specs, ctx.stream, waiting, options)
            tracing.chat_reply(span, reply.usage, reply.finish_reason, reply.message)
        return reply

    def _gate(self, journal: Journal, pending: list[str]) -> NeedsInput:
        """Ask a person about the calls in `pending` (each on its own, or all at once)."""
        denial = {"approved": False, "reason": "no answer came in time"}
        return NeedsInput(
            prompt=approval_prompt(_pending(journal), pending),
            schema=approval_schema(pending),
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
            return rebuild(self.instructions, role, [], earlier), []
        entries = await self._runtime.history(ctx)
        start = self._start_of(entries)
        if start is None:
            raise TerminalError(f"step {ctx.step} of agent {self.name!r} has no first turn")
        first = entries[start].spec.input
        if first is None and start > 0:  # the question was the previous step's output
            first = entries[start - 1].output
        opening = as_step(first)
        earlier = await self._runtime.thread(ctx, opening.after)
        journal = rebuild(self.instructions, opening, entries[start:], earlier)
        return journal, entries

    def _start_of(self, entries: list[Entry]) -> int | None:
        """The latest first turn of this agent (a plan may ask the same agent twice)."""
        for index in range(len(entries) - 1, -1, -1):
            spec = entries[index].spec
            if spec.tool == self.name and not as_step(spec.input).continues:
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


class _Runtime:
    """What a worker process keeps for an agent: one client per model, and recent
    conversations (checkpoints never change, so what was read stays true)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[OpenAIModel, str | None], openai.AsyncOpenAI] = {}
        self._in_use: dict[openai.AsyncOpenAI, int] = {}
        self._retired: set[openai.AsyncOpenAI] = set()
        self._histories: OrderedDict[tuple[str, datetime], list[Entry]] = OrderedDict()
        """By task id and creation time: a task removed by `gc` and a new one under its
        id never share a history."""
        self._tools: dict[str, tuple[ToolInfo, float]] = {}
        self._threads: OrderedDict[tuple[str, datetime], list[dict[str, Any]]] = OrderedDict()
        """Finished conversations follow-ups continue, by task id and creation time."""
        self.no_json_schema: set[OpenAIModel] = set()
        """Models whose endpoint refused `response_format` `json_schema`."""
        self._mcp_tools: dict[str, tuple[list[McpTool], float]] = {}

    @contextlib.asynccontextmanager
    async def using(self, model: OpenAIModel) -> AsyncIterator[openai.AsyncOpenAI]:
        """The model's client for one call (closed after it if `aclose` came meanwhile)."""
        key = (model, os.environ.get("OPENAI_BASE_URL"))  # the default endpoint may move
        if key not in self._clients:
            self._clients[key] = model.client()
        client = self._clients[key]
        self._in_use[client] = self._in_use.get(client, 0) + 1
        try:
            yield client
        finally:
            self._in_use[client] -= 1
            if not self._in_use[client]:
                del self._in_use[client]
                if client in self._retired:
                    self._retired.discard(client)
                    await client.close()

    async def aclose(self) -> None:
        """Close every client; one in a call closes when the call ends (another worker of
        this process may still be using the agent)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            if client in self._in_use:
                self._retired.add(client)
            else:
                await client.close()

    async def history(self, ctx: StepContext) -> list[Entry]:
        """One entry per step before `ctx.step` (a step without a checkpoint is left out,
        and then nothing is kept)."""
        key = (ctx.task_id, ctx.created_at)
        known = self._histories.pop(key, [])[: ctx.step]
        read = await ctx.history(len(known))
        entries = [*known, *(_entry(c) for c in read if c is not None)]
        if len(entries) == ctx.step:
            self._histories[key] = entries
            while len(self._histories) > HISTORY_CACHE:
                self._histories.popitem(last=False)
        return entries

    async def thread(self, ctx: StepContext, task_id: str | None) -> list[dict[str, Any]]:
        """The messages of the finished conversation `task_id` and of those it continues,
        without their system messages ([] for None). A finished task does not change, so
        each is read once per process; only the newest record is read again (a task
        removed by `gc` and one made under its id never share a thread)."""
        unread: list[tuple[tuple[str, datetime], AgentStep, list[Entry]]] = []
        messages: list[dict[str, Any]] = []
        while task_id is not None:
            record = await ctx.other_task(task_id)
            if record is None:
                raise TerminalError(
                    f"the conversation a follow-up continues, task {task_id!r}, does not "
                    "exist (or was removed by 'tether gc'): start a new conversation"
                )
            key = (task_id, record.created_at)
            if key in self._threads:
                self._threads.move_to_end(key)
                messages = self._threads[key]
                break
            opening, entries = finished_conversation(record, await ctx.checkpoints_of(record))
            unread.append((key, opening, entries))
            task_id = opening.after
            if len(unread) > MAX_THREAD:
                raise TerminalError(f"a follow-up continues more than {MAX_THREAD} tasks")
        for key, opening, entries in reversed(unread):
            rebuilt = rebuild("", opening, entries, messages, finished=True).messages
            messages = [m for m in rebuilt if m.get("role") != "system"]
            self._threads[key] = messages
        while len(self._threads) > HISTORY_CACHE:
            self._threads.popitem(last=False)
        return messages

    async def mcp_tools(self, servers: tuple[str, ...]) -> list[McpTool]:
        """The tools `servers` list, each listed again after `TOOL_INFO_AGE`."""
        from tether.agents.mcp_tools import list_tools

        tools: list[McpTool] = []
        for server in servers:
            cached = self._mcp_tools.get(server)
            if cached is None or time.monotonic() - cached[1] >= TOOL_INFO_AGE:
                cached = (await list_tools(server), time.monotonic())
                self._mcp_tools[server] = cached
            tools.extend(cached[0])
        return tools

    async def tool_info(self, ctx: StepContext, name: str) -> ToolInfo | None:
        """A tool's registration, read again after `TOOL_INFO_AGE` (a schema may change)."""
        cached = self._tools.get(name)
        if cached is not None and time.monotonic() - cached[1] < TOOL_INFO_AGE:
            return cached[0]
        info = await ctx.tool_info(name)
        if info is not None:
            self._tools[name] = (info, time.monotonic())
        return info


def finished_conversation(
    record: TaskRecord, checkpoints: list[Checkpoint | None]
) -> tuple[AgentStep, list[Entry]]:
    """A completed agent task as a conversation: its opening and every step, the last
    (not checkpointed) with the task's result as its output."""
    if record.status is not TaskStatus.COMPLETED:
        raise TerminalError(
            f"task {record.task_id!r} is {record.status.value}: only a completed "
            "conversation can be continued (wait for its answer, then ask again)"
        )
    if any(c is None for c in checkpoints):
        raise TerminalError(f"task {record.task_id!r} is missing checkpoints of its steps")
    entries = [_entry(c) for c in checkpoints if c is not None]
    entries.append(Entry(record.steps[-1], record.result, None))
    opening = as_step(entries[0].spec.input)
    if entries[0].spec.parallel is not None or opening.continues or opening.input is None:
        raise TerminalError(f"task {record.task_id!r} is not an agent's conversation")
    return opening, entries


def _guarded_answer(before: list[Entry]) -> Any:
    """The answer the output guardrails passed: the latest `{"answer": ...}` output."""
    for entry in reversed(before):
        if isinstance(entry.output, dict) and set(entry.output) == {"answer"}:
            return entry.output["answer"]
    raise TerminalError("a finish step found no answer before it")


def _entry(checkpoint: Checkpoint) -> Entry:
    assert checkpoint.spec is not None
    return Entry(checkpoint.spec, checkpoint.output, checkpoint.usage)


def _pending(journal: Journal) -> Turn:
    if journal.last_turn is None:
        raise TerminalError("an approval step found no tool calls waiting for it")
    return journal.last_turn


def _result(next_: Next) -> Any:
    return NextSteps(steps=next_.steps, output=next_.output) if next_.steps else next_.output
