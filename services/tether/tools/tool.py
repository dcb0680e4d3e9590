"""`Tool`: a registered tool and its options, and how a function becomes one."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tether.durations import as_timedelta
from tether.errors import DefinitionError
from tether.schemas import types
from tether.schemas.builds import Versioning, WhenGone
from tether.schemas.ids import validate_tool_name
from tether.tools.results import stored
from tether.tools.retry import RetryPolicy
from tether.tools.signatures import Signature, hints_of, read_signature, untyped

log = logging.getLogger("tether.tools")

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
    lone_field: str | None = None
    """The one parameter of a function that takes it as a field (`def f(notes: str)`):
    a step input that is not an object (the previous step's output, in a plan) is taken
    as its value, as a person reading the function expects."""
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
        return types.json_schema(self.input_type)

    def convert_input(self, data: Any) -> Any:
        """The step input as the tool's annotated type (a Struct, a Pydantic model, ...);
        raises msgspec.ValidationError naming the field, whichever library checked it."""
        if self.input_type is Any:
            return data
        if self.lone_field is not None and not isinstance(data, dict | None):
            data = {self.lone_field: data}
        return types.convert(data, self.input_type)


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


def _caller(fn: Callable[..., Any], signature: Signature, returns_model: bool) -> ToolFunction:
    """`fn` as the worker calls it, `(ctx)` or `(ctx, data)`: the function itself when it
    takes just that, else a wrapper that spreads the input over its parameters and
    stores Pydantic models as JSON. A plain `def` runs in a thread of its own
    (`asyncio.to_thread`), so a slow one does not stop the worker's beat; it cannot
    await `ctx`'s methods, and a step's timeout stops waiting for it, not the thread."""
    is_async = inspect.iscoroutinefunction(fn)
    if is_async and signature.wants_ctx and not signature.spread and not returns_model:
        return fn

    @functools.wraps(fn)
    async def call(*given: Any) -> Any:
        args, kwargs = signature.arguments(given)
        if is_async:
            return stored(await fn(*args, **kwargs), returns_model)
        return stored(await asyncio.to_thread(fn, *args, **kwargs), returns_model)

    return call


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
    hints = hints_of(fn)
    signature = read_signature(fn, label, hints)
    if bare := untyped(fn, signature):
        log.warning(
            "%s takes %s without a type: taken as given, any JSON value, unchecked (and "
            "shown to models untyped); annotate it to have its input checked, e.g. `%s: int`",
            label,
            ", ".join(bare),
            bare[0],
        )
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"tool {fn.__name__!r}: max_concurrency must be at least 1")
    beat = seconds(heartbeat)
    assert beat is not None
    returns = hints.get("return", Any)
    return Tool(
        name=validate_tool_name(name or fn.__name__),
        function=_caller(fn, signature, types.holds_model(returns)),
        input_type=signature.input_type,
        returns=returns,
        lone_field=signature.parameters[0] if signature.lone_field else None,
        takes_input=signature.takes_input,
        description=description if description is not None else signature.description,
        retry=retry or RetryPolicy(),
        timeout=seconds(timeout),
        max_concurrency=max_concurrency,
        heartbeat=beat,
    )
