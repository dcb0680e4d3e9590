"""An agent's MCP servers, their tool calls durable units: each call's result is
journaled under its call id, so a replay gets it back without calling the server, and a
call a crash cut off is sent again only when the tool's annotations say that is safe
(`readOnlyHint` or `idempotentHint`); otherwise the model is told its outcome is unknown
(`Journal.send`), as Tether's own agents' MCP calls are. Listing tools is a read, not a
unit.

`DurableServer` wraps the user's server (left as it is) on the SDK's public `MCPServer`
interface. The SDK asks a server's `tool_meta_resolver` for each call's `_meta` with the
call's context just before it calls `call_tool` in a task of its own: the wrapper's
resolver keeps the call's id there for `call_tool` to key its unit by. An agent added
with `app.add` has its servers connected by Tether at their first use in a worker and
closed when the worker stops (`Connections`); the drop-in `Runner` leaves that to the
caller, as the SDK does.
"""

from __future__ import annotations

import asyncio
import json
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from agents.mcp import MCPServer, MCPServerManager, MCPToolMetaContext

from tether.agents.mcp_rules import repeatable, unknown_outcome
from tether.integrations.openai_agents import _scope

_call_id: ContextVar[str | None] = ContextVar("tether_openai_agents_mcp_call", default=None)


class Connections:
    """The MCP servers Tether connects for an agent it runs: one session each per worker,
    opened in a task of its own (`MCPServerManager`), so closing it when the worker stops
    is allowed."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._managers: dict[MCPServer, MCPServerManager] = {}

    async def ready(self, server: MCPServer) -> None:
        """Connect `server` unless it is connected (by Tether, or by its owner)."""
        if server in self._managers or getattr(server, "session", True) is not None:
            return
        async with self._lock:
            if server not in self._managers:
                manager = MCPServerManager([server], connect_in_parallel=True, strict=True)
                await manager.connect_all()
                self._managers[server] = manager

    async def close(self) -> None:
        """The worker stops: close what Tether connected."""
        managers, self._managers = list(self._managers.values()), {}
        for manager in managers:
            await manager.cleanup_all()


class DurableServer(MCPServer):
    """`inner`, each tool call a unit of the running step's journal (outside a Tether
    step, or inside a unit that runs a whole sub-agent: `inner` itself). Every setting is
    the inner server's, read through it."""

    def __init__(self, inner: MCPServer, connections: Connections | None = None) -> None:
        # no MCPServer.__init__: its settings are read from `inner` (`__getattr__`)
        self.inner, self._connections = inner, connections
        self._repeatable: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def tool_meta_resolver(self) -> Any:
        return self._resolve_meta

    @tool_meta_resolver.setter
    def tool_meta_resolver(self, resolver: Any) -> None:
        self.inner.tool_meta_resolver = resolver

    def _resolve_meta(self, context: MCPToolMetaContext) -> Any:
        """Keep the call's id for `call_tool` (the SDK calls it next, in a task that
        copies this context), then ask the inner server's resolver."""
        _call_id.set(getattr(context.run_context, "tool_call_id", None))
        inner = self.inner.tool_meta_resolver
        return None if inner is None else inner(context)

    async def connect(self) -> None:
        await self.inner.connect()  # type: ignore[no-untyped-call]

    async def cleanup(self) -> None:
        await self.inner.cleanup()  # type: ignore[no-untyped-call]

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[types.Tool]:
        if self._connections is not None:
            await self._connections.ready(self.inner)
        tools = await self.inner.list_tools(run_context, agent)
        self._repeatable.update((t.name, repeatable(t.annotations)) for t in tools)
        return tools

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> types.CallToolResult:
        scope = _scope.current.get()
        call = _call_id.get()
        if scope is None or scope.journal is None:
            return await self._call(tool_name, arguments, meta)
        if call is None:  # no id given (a caller other than the SDK's tool path)
            call = f"{tool_name} {json.dumps(arguments, sort_keys=True, default=str)}"

        async def body() -> dict[str, Any]:
            await scope.ctx.progress(message=f"calling {tool_name} on {self.name}")
            return _dump(await self._call(tool_name, arguments, meta))

        stored = await scope.journal.send(
            f"mcp.{self.name}.{tool_name}",
            body,
            call=call,
            repeatable=self._repeatable.get(tool_name, False),
            unknown=lambda: _dump(_error(unknown_outcome(tool_name))),
        )
        return types.CallToolResult.model_validate(stored)

    async def _call(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None
    ) -> types.CallToolResult:
        if self._connections is not None:
            await self._connections.ready(self.inner)
        if meta is None:
            return await self.inner.call_tool(tool_name, arguments)
        return await self.inner.call_tool(tool_name, arguments, meta=meta)

    @property
    def cached_tools(self) -> list[types.Tool] | None:
        return self.inner.cached_tools

    async def list_prompts(self) -> types.ListPromptsResult:
        return await self.inner.list_prompts()

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None
    ) -> types.GetPromptResult:
        return await self.inner.get_prompt(name, arguments)

    async def list_resources(self, cursor: str | None = None) -> types.ListResourcesResult:
        return await self.inner.list_resources(cursor)

    async def list_resource_templates(
        self, cursor: str | None = None
    ) -> types.ListResourceTemplatesResult:
        return await self.inner.list_resource_templates(cursor)

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        return await self.inner.read_resource(uri)


def durable_servers(servers: list[MCPServer], connections: Connections | None) -> list[MCPServer]:
    """`servers` as durable ones (a server already durable is kept)."""
    return [s if isinstance(s, DurableServer) else DurableServer(s, connections) for s in servers]


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _dump(result: types.CallToolResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
