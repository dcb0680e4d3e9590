"""`Tool`: a registered tool and its options, and how a function becomes one."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, get_type_hints

import msgspec

from tether.durations import as_timedelta
from tether.errors import DefinitionError
from tether.schemas.builds import Versioning, WhenGone
from tether.schemas.ids import validate_tool_name
from tether.tools.retry import RetryPolicy

ToolFunction = Callable[..., Awaitable[Any]]
"""A tool's function as the worker calls it (a plain `def` is wrapped to run in a thread)."""


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
    """The tool runs an agent's turns (`Agent.as_tool`)."""
    calls: tuple[str, ...] = ()
    """The tools an agent calls (checked when a worker starts)."""
    helpers: tuple[ToolFunction, ...] = ()
    """Plain functions it calls as tools of their own (an agent's guardrails): `App.add`
    registers each one the app does not have yet, by its name."""
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


def names(tools: Sequence[str | ToolFunction]) -> tuple[str, ...]:
    return tuple(tool if isinstance(tool, str) else tool.__name__ for tool in tools)


def seconds(value: timedelta | float | None) -> timedelta | None:
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
    from tether.tools.context import StepContext  # the store and nats-py: only when used

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


def make_tool(
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
    beat = seconds(heartbeat)
    assert beat is not None
    return Tool(
        name=validate_tool_name(name or fn.__name__),
        function=fn,
        input_type=input_type,
        returns=hints.get("return", Any),
        takes_input=len(parameters) == 2,
        description=description if description is not None else inspect.getdoc(fn) or "",
        retry=retry or RetryPolicy(),
        timeout=seconds(timeout),
        max_concurrency=max_concurrency,
        heartbeat=beat,
    )
