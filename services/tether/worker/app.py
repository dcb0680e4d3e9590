"""`App`: the registry of tools a worker serves. Create one per service; no globals."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, get_type_hints, overload

import msgspec

from tether.durations import as_timedelta
from tether.schemas.ids import validate_tool_name
from tether.worker.retry import RetryPolicy

ToolFunction = Callable[..., Awaitable[Any]]
F = TypeVar("F", bound=ToolFunction)


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
    """How often a running step proves it is alive; a step silent for 5× this is redelivered."""

    @property
    def ack_wait(self) -> timedelta:
        return self.heartbeat * 5

    def input_schema(self) -> dict[str, Any]:
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

    def __init__(self, name: str = "tether") -> None:
        self.name = name
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
    ) -> Any:
        """Register `async def tool(ctx, data: T) -> R`; usable bare or with options."""

        def register(fn: F) -> F:
            self.add_tool(
                _make_tool(fn, name, description, retry, timeout, max_concurrency, heartbeat)
            )
            return fn

        return register(function) if function is not None else register

    def add_tool(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} is registered twice in app {self.name!r}")
        self.tools[tool.name] = tool


def _seconds(value: timedelta | float | None) -> timedelta | None:
    return None if value is None else as_timedelta(value)


def _make_tool(
    fn: ToolFunction,
    name: str | None,
    description: str | None,
    retry: RetryPolicy | None,
    timeout: timedelta | float | None,
    max_concurrency: int | None,
    heartbeat: timedelta | float,
) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {fn.__name__!r} must be an 'async def' function")
    parameters = list(inspect.signature(fn).parameters.values())
    if not 1 <= len(parameters) <= 2:
        raise TypeError(f"tool {fn.__name__!r} must take (ctx) or (ctx, data)")
    input_type: Any = Any
    if len(parameters) == 2:
        input_type = get_type_hints(fn).get(parameters[1].name, Any)
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"tool {fn.__name__!r}: max_concurrency must be at least 1")
    beat = _seconds(heartbeat)
    assert beat is not None
    return Tool(
        name=validate_tool_name(name or fn.__name__),
        function=fn,
        input_type=input_type,
        takes_input=len(parameters) == 2,
        description=description if description is not None else inspect.getdoc(fn) or "",
        retry=retry or RetryPolicy(),
        timeout=_seconds(timeout),
        max_concurrency=max_concurrency,
        heartbeat=beat,
    )
