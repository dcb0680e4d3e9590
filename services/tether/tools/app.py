"""`App`: the registry of tools a worker serves. Create one per service; no globals.

A tool author's whole desk is this package (`tether.tools`): `App`, `Tool`,
`StepContext`, the results a tool may return and `RetryPolicy`. The worker package
hosts what is written here; an agent is one more thing the app adds (`App.add`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar, overload, runtime_checkable

from tether.durations import as_timedelta
from tether.schemas.builds import Versioning, WhenGone
from tether.tools.retry import RetryPolicy
from tether.tools.spelling import misspelled_calls
from tether.tools.tool import Tool, make_tool

log = logging.getLogger("tether.tools")
F = TypeVar("F", bound=Callable[..., Any])
"""A tool: `async def`, or a plain `def` (run in a thread)."""


@runtime_checkable
class ToolSource(Protocol):
    """Anything that serves as a tool: Tether's `Agent`, an agent of another framework
    behind a thin adapter. `App.add` registers what `as_tool()` returns."""

    def as_tool(self) -> Tool: ...


S = TypeVar("S")


class App:
    """A named set of tools.

    ```python
    app = App("research")

    @app.tool(retry=RetryPolicy(max_attempts=5))
    async def search(query: Query) -> list[Hit]: ...

    app.add(Agent("researcher", model="gpt-4o-mini", tools=["search"]))
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
        """Register a tool; usable bare or with options. It is written as for other
        frameworks: `async def get_weather(city: str, unit: str = "C") -> str` takes each
        parameter as a field of its input (described by the docstring's `Args:`), one
        Struct, Pydantic model, dataclass or TypedDict parameter as the whole input, and
        a first parameter `ctx: StepContext` when it wants the step's context (`(ctx,
        data: T)` takes `data` whole, whatever `T` is). A plain `def` runs in a thread.

        `approval=True`: an agent that calls this tool waits for a person to approve.
        `versioning`: `moving` or `pinned` across builds (default: the app's).
        """

        def register(fn: F) -> F:
            tool = make_tool(fn, name, description, retry, timeout, max_concurrency, heartbeat)
            self.add_tool(dataclasses.replace(tool, approval=approval, versioning=versioning))
            return fn

        return register(function) if function is not None else register

    def add(self, source: S) -> S:
        """Register a `Tool`, or anything with `as_tool()` (`app.add(Agent(...))`), and
        return it. Plain functions the tool calls (`Tool.helpers`: an agent's guardrails)
        are registered first, each unless the app has a tool of its name already."""
        from tether.integrations.registry import is_foreign_agent  # pure: no framework

        tool: Tool
        if isinstance(source, Tool):
            tool = source
        elif isinstance(source, ToolSource) and not is_foreign_agent(source):
            tool = source.as_tool()
        else:  # an agent of another framework: its adapter, imported only now
            from tether.integrations.adapters import adapt

            tool = adapt(source)
        for helper in tool.helpers:
            if helper.__name__ not in self.tools:
                self.tool(helper)
        self.add_tool(tool)
        return source

    def add_tool(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} is registered twice in app {self.name!r}")
        self.tools[tool.name] = dataclasses.replace(
            tool,
            versioning=tool.versioning or self.versioning,
            when_gone=self.when_gone,
            build_grace=self.build_grace,
        )
        self._check_spelling(tool.name)

    def _check_spelling(self, added: str) -> None:
        """Warn about an agent's tool that this app lacks but has one spelled almost so
        (it may be another app's, served by another worker: so a warning, not an error)."""
        calls = {name: tool.calls for name, tool in self.tools.items()}
        for agent, name, close in misspelled_calls(added, calls):
            log.warning(
                "app %r: agent %r lists tool %r, which this app does not have: did you mean "
                "%r? (its turns wait until a worker serves %r)",
                self.name,
                agent,
                name,
                close,
                name,
            )
