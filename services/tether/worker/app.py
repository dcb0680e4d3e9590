"""`App`: the registry of tools a worker serves. Create one per service; no globals."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import inspect
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_type_hints, overload

import msgspec

from tether.durations import as_timedelta
from tether.errors import DefinitionError
from tether.schemas.builds import Versioning, WhenGone
from tether.schemas.ids import validate_tool_name
from tether.worker.retry import RetryPolicy

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.agents.models import OpenAIModel

ToolFunction = Callable[..., Awaitable[Any]]
F = TypeVar("F", bound=Callable[..., Any])
"""A tool: `async def`, or a plain `def` (run in a thread)."""


@dataclass(frozen=True)
class Tool:
    """A registered tool and its options."""

    name: str
    function: ToolFunction
    input_type: Any = Any
    takes_input: bool = True
    description: str = ""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: timedelta | None = None
    """Per-attempt limit; a timed-out attempt is retried like any other failure."""
    max_concurrency: int | None = None
    """Steps of this tool in flight across all workers (the consumer's max-ack-pending)."""
    heartbeat: timedelta = timedelta(seconds=1)
    """A step still running after half of this is held by its worker (whose beat keeps
    it); one that keeps its message (a tool with `max_concurrency`) extends it this often,
    and is redelivered when silent for `ack_wait`."""
    approval: bool = False
    """An agent asks a person before it calls this tool."""
    schema: dict[str, Any] | None = None
    """The input schema to advertise, when the input type does not say it (an agent's)."""
    output_schema: dict[str, Any] | None = None
    """The schema of what the tool returns, when it says (an agent's `output_type`)."""
    agent: bool = False
    """The tool runs an agent's turns (`App.agent`)."""
    calls: tuple[str, ...] = ()
    """The tools an agent calls (checked when a worker starts)."""
    close: Callable[[], Awaitable[None]] | None = None
    """Called when a worker that served the tool stops (an agent closes its model
    clients, whose connections would otherwise be left to the garbage collector)."""
    returns: Any = Any
    """The annotated return type (its schema is compared between builds)."""
    versioning: Versioning | None = None
    """`moving` or `pinned` (see `tether.schemas.builds`); None: the app's."""
    when_gone: WhenGone = "move"
    build_grace: timedelta = timedelta(seconds=60)
    """A pinned step whose build no worker runs any more: `when_gone` after this long."""

    def input_schema(self) -> dict[str, Any]:
        if self.schema is not None:
            return self.schema
        if not self.takes_input or self.input_type is Any:
            return {}
        schema: dict[str, Any] = msgspec.json.schema(self.input_type)
        return schema

    def convert_input(self, data: Any) -> Any:
        """The step input as the tool's annotated type; raises msgspec.ValidationError."""
        if self.input_type is Any:
            return data
        return msgspec.convert(data, self.input_type, strict=False)


class App:
    """A named set of tools.

    ```python
    app = App("research")

    @app.tool(retry=RetryPolicy(max_attempts=5))
    async def search(ctx: StepContext, query: Query) -> list[Hit]: ...
    ```
    """

    def __init__(
        self,
        name: str = "tether",
        *,
        version: str | None = None,
        versioning: Versioning = "moving",
        when_gone: WhenGone = "move",
        build_grace: timedelta | float = timedelta(seconds=60),
    ) -> None:
        self.name = name
        self.version = version
        """The build its workers announce (else a hash of its tools: `worker.builds`)."""
        self.versioning: Versioning = versioning
        """Its tools' and agents' default: `moving`, each step on the newest build that
        takes its input, or `pinned`, every step of a task on the build that started it."""
        self.when_gone: WhenGone = when_gone
        self.build_grace = as_timedelta(build_grace)
        """A pinned step whose build no worker runs any more waits this long, then
        `when_gone` says: `move` (to the current build, if its tool takes the step's
        input), `wait`, or `fail`."""
        self.tools: dict[str, Tool] = {}

    @overload
    def tool(self, function: F, /) -> F: ...

    @overload
    def tool(
        self,
        function: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,
        max_concurrency: int | None = None,
        heartbeat: timedelta | float = timedelta(seconds=1),
        approval: bool = False,
        versioning: Versioning | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        function: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,
        max_concurrency: int | None = None,
        heartbeat: timedelta | float = timedelta(seconds=1),
        approval: bool = False,
        versioning: Versioning | None = None,
    ) -> Any:
        """Register `async def tool(ctx, data: T) -> R`; usable bare or with options.

        `approval=True`: an agent that calls this tool waits for a person to approve.
        `versioning`: `moving` or `pinned` across builds (default: the app's).
        """

        def register(fn: F) -> F:
            tool = _make_tool(fn, name, description, retry, timeout, max_concurrency, heartbeat)
            self.add_tool(dataclasses.replace(tool, approval=approval, versioning=versioning))
            return fn

        return register(function) if function is not None else register

    def _guardrails(self, checks: Sequence[str | ToolFunction]) -> tuple[str, ...]:
        """The guardrails' tool names; a plain function not registered yet is, here."""
        for check in checks:
            if not isinstance(check, str) and check.__name__ not in self.tools:
                self.tool(check)
        return _names(checks)

    def add_tool(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} is registered twice in app {self.name!r}")
        self.tools[tool.name] = dataclasses.replace(
            tool,
            versioning=tool.versioning or self.versioning,
            when_gone=self.when_gone,
            build_grace=self.build_grace,
        )

    def agent(
        self,
        name: str,
        *,
        model: str | OpenAIModel,
        instructions: str = "",
        tools: Sequence[str | ToolFunction] = (),
        max_turns: int = 20,
        token_budget: int | None = None,
        cost_budget: float | None = None,
        on_budget: Literal["ask", "fail"] = "ask",
        budget_timeout: timedelta | float | None = None,
        approval: Sequence[str | ToolFunction] = (),
        approval_timeout: timedelta | float | None = None,
        approval_timeout_denies: bool = False,
        output_type: Any = None,
        output_retries: int = 2,
        input_guardrails: Sequence[str | ToolFunction] = (),
        output_guardrails: Sequence[str | ToolFunction] = (),
        tool_choice: str | dict[str, Any] | None = None,
        reset_tool_choice: bool = True,
        mcp_servers: Sequence[str] = (),
        handoffs: Sequence[str] = (),
        description: str | None = None,
        retry: RetryPolicy | None = None,
        versioning: Versioning | None = None,
    ) -> Agent:
        """Register an agent: an LLM tool-calling loop served as the tool `name`.

        ```python
        researcher = app.agent(
            "researcher",
            model="gpt-4o-mini",  # or OpenAIModel("llama3.1", base_url="http://localhost:11434/v1")
            instructions="Answer with sources.",
            tools=["search", "fetch_page"],
        )
        ```

        Each LLM turn is a durable step, each tool call a branch of a parallel step, so
        a crash re-runs only what was in flight. `tools` name Tether tools, served by any
        worker in any language (their JSON Schemas come from the registry). `approval`:
        tools whose calls wait for a person (as do tools registered `approval=True`).
        An agent among `tools` is a sub-agent: each call runs as a child task. When a
        reply asks for several gated calls, the others run at once and the task waits
        for an answer per call (`{"call_id": ..., "approved": ..., "arguments"?: ...}`)
        or one for all; unanswered within `approval_timeout`, the task fails, or, with
        `approval_timeout_denies=True`, the calls still waiting are denied.

        `output_type` (a msgspec Struct, a dataclass or a JSON Schema): the final answer
        is asked for and checked as that type, and told back to the model up to
        `output_retries` times when it does not fit (then the task fails, `InvalidOutput`).
        `input_guardrails` / `output_guardrails` (tools, or plain functions registered as
        tools here): each gets the question before the first turn, or the final answer
        before it is the result, as a step of its own; one that raises
        `GuardrailTripped(reason)` fails the task with it. `tool_choice` goes with the
        first LLM call; after it the model chooses again, unless `reset_tool_choice=False`.
        `token_budget` and `cost_budget` (dollars, from the model's price) hold for the
        task and every task below it (sub-agents): each LLM call reserves its worst case
        first. When a call does not fit, the task asks a person to raise the budget or
        stop (`on_budget="fail"`: it fails), for up to `budget_timeout`.
        `handoffs` (agents): the model may hand the conversation over to one of them
        (`transfer_to_<agent>`), which takes it from the next turn on, under its own
        instructions and tools, in the same task (a sub-agent answers one question in a
        task of its own instead).
        `mcp_servers` (streamable HTTP URLs): the tools each lists are offered too, each
        call a branch like any other; after a crash mid-call, a call is made again only
        when the tool says that is safe (`readOnlyHint`, `idempotentHint`), and a server
        that runs calls as tasks (MCP tasks) is polled instead of called twice.
        `versioning="pinned"`: every turn of a conversation runs on the build that
        started it, so it keeps its instructions, tools and model through a deploy
        (default: the app's).
        """
        from tether.agents.agent import LLM_RETRY, agent_input_schema
        from tether.agents.agent import Agent as AgentType
        from tether.agents.models import OpenAIModel as Model
        from tether.agents.output import output_type as typed_output

        if max_turns < 1:
            raise ValueError(f"agent {name!r}: max_turns must be at least 1")
        if output_retries < 0:
            raise ValueError(f"agent {name!r}: output_retries must be 0 or more")
        if mcp_servers:  # the `mcp` client takes seconds to import: now, not mid-step
            importlib.import_module("tether.agents.mcp_tools")
        input_checks = self._guardrails(input_guardrails)
        output_checks = self._guardrails(output_guardrails)
        chosen = Model(model) if isinstance(model, str) else model
        output = None if output_type is None else typed_output(output_type)
        agent = AgentType(
            name=validate_tool_name(name),
            model=chosen,
            instructions=instructions,
            tools=_names(tools),
            max_turns=max_turns,
            token_budget=token_budget,
            cost_budget=cost_budget,
            on_budget=on_budget,
            budget_timeout=_seconds(budget_timeout),
            approval=frozenset(_names(approval)),
            approval_timeout=_seconds(approval_timeout),
            approval_timeout_denies=approval_timeout_denies,
            output=output,
            output_retries=output_retries,
            tool_choice=tool_choice,
            reset_tool_choice=reset_tool_choice,
            input_guardrails=input_checks,
            output_guardrails=output_checks,
            mcp_servers=tuple(mcp_servers),
            handoffs=tuple(handoffs),
        )
        self.add_tool(
            Tool(
                name=agent.name,
                function=agent.run_step,
                description=description or f"Agent {name!r} on {chosen.name}: {instructions}",
                retry=retry or LLM_RETRY,
                max_concurrency=chosen.max_concurrency,
                schema=agent_input_schema(token_budget, cost_budget),
                output_schema=None if output is None else output.schema,
                agent=True,
                calls=(*agent.tools, *input_checks, *output_checks, *agent.handoffs),
                close=agent.aclose,
                versioning=versioning,
            )
        )
        return agent


def _names(tools: Sequence[str | ToolFunction]) -> tuple[str, ...]:
    return tuple(tool if isinstance(tool, str) else tool.__name__ for tool in tools)


def _seconds(value: timedelta | float | None) -> timedelta | None:
    return None if value is None else as_timedelta(value)


def defined_at(fn: Callable[..., Any]) -> str:
    """`path/to/module.py:12`, where `fn` is defined (relative to the working directory
    when it is under it)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return repr(fn)
    path = code.co_filename
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(path)
        path = path if relative.startswith("..") else relative
    return f"{path}:{code.co_firstlineno}"


def _check_context(
    label: str, function: str, parameters: list[inspect.Parameter], hints: dict[str, Any]
) -> None:
    """A tool's first parameter is its StepContext: one annotated as anything else is a
    tool written without `ctx`, which would get the context as its data."""
    from tether.worker.context import StepContext

    first = parameters[0]
    annotation = hints.get(first.name, Any)
    if annotation is Any or annotation is StepContext:
        return
    shown = getattr(annotation, "__name__", repr(annotation))
    rest = ", ".join(
        f"{p.name}: {getattr(hints.get(p.name), '__name__', 'Any')}" for p in parameters
    )
    raise DefinitionError(
        f"{label} takes ({first.name}: {shown}), but a tool's first parameter is its "
        f"StepContext: write `async def {function}(ctx: StepContext, {rest})`"
        + (" with one parameter for the data" if len(parameters) > 1 else "")
    )


def _in_a_thread(fn: Callable[..., Any]) -> ToolFunction:
    """A plain function as a tool: each call runs in a thread of its own (`asyncio.
    to_thread`), so a slow one does not stop the worker's beat. It cannot await `ctx`'s
    methods; a step's timeout stops waiting for it, not the thread."""

    @functools.wraps(fn)
    async def in_a_thread(*args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    return in_a_thread


def _make_tool(
    fn: ToolFunction,
    name: str | None,
    description: str | None,
    retry: RetryPolicy | None,
    timeout: timedelta | float | None,
    max_concurrency: int | None,
    heartbeat: timedelta | float,
) -> Tool:
    where = defined_at(fn)
    label = f"{where}: tool {name or fn.__name__!r}"
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise DefinitionError(
            f"{label} yields: a tool returns its result (stream text with "
            "`await ctx.stream(text)`), so write `return ...` instead of `yield`"
        )
    parameters = list(inspect.signature(fn).parameters.values())
    if not 1 <= len(parameters) <= 2:
        raise DefinitionError(
            f"{label} takes {len(parameters)} parameters, but a tool must take (ctx) or "
            f"(ctx, data): write `async def {fn.__name__}(ctx: StepContext, data: ...)`"
        )
    try:
        hints = get_type_hints(fn)
    except Exception:  # a forward reference it cannot resolve: judged at run time
        hints = {}
    _check_context(label, fn.__name__, parameters, hints)
    input_type: Any = Any
    if len(parameters) == 2:
        input_type = hints.get(parameters[1].name, Any)
    if not inspect.iscoroutinefunction(fn):
        fn = _in_a_thread(fn)  # a plain `def`: run where it cannot block the worker
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"tool {fn.__name__!r}: max_concurrency must be at least 1")
    beat = _seconds(heartbeat)
    assert beat is not None
    return Tool(
        name=validate_tool_name(name or fn.__name__),
        function=fn,
        input_type=input_type,
        returns=hints.get("return", Any),
        takes_input=len(parameters) == 2,
        description=description if description is not None else inspect.getdoc(fn) or "",
        retry=retry or RetryPolicy(),
        timeout=_seconds(timeout),
        max_concurrency=max_concurrency,
        heartbeat=beat,
    )
