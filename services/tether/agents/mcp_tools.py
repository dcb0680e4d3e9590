"""Tools from MCP servers: offered to an agent's model, each call a durable branch.

An agent with `mcp_servers` offers its model the tools each server lists (`tools/list`:
names, descriptions, input schemas). A call runs as a branch of the turn's parallel
group, as a step of the agent's own tool whose input is `{"mcp": {...}}`, made with the
official `mcp` client. A crash mid-call must not call the tool twice unless that is safe:

- Before sending, the step marks (once, in the checkpoint store) which attempt sends it.
  An attempt that finds an earlier attempt's mark cannot know whether that one reached
  the server: it calls again only when the tool says that is safe (`readOnlyHint` or
  `idempotentHint`); otherwise the model is told the outcome is unknown.
- A server that answers with a task (the MCP tasks extension; Tether's own gateway does)
  has the task's id stored at once and is polled; a later attempt polls the same task.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp_types as types
import msgspec
from mcp.shared.exceptions import MCPError

from tether.agents.conversation import McpCall
from tether.agents.mcp_rules import repeatable, unknown_outcome
from tether.errors import RetryableError
from tether.mcp_tasks import (
    TERMINAL_STATUSES,
    CreatedTask,
    cancel_task,
    get_task,
    tasks_client,
    wait_for_task,
)
from tether.tools.context import StepContext

log = logging.getLogger("tether.agents")
TASK_TIMEOUT = 24 * 3600.0
"""Seconds a call made as a task is polled (the step's own timeout and heartbeat still hold)."""
_SENT, _TASK = "mcp-sent", "mcp-task"


class McpTool(msgspec.Struct, frozen=True):
    """One tool a server listed, as the model is offered it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    safe: bool
    """Calling it again after a crash is safe (`readOnlyHint` or `idempotentHint`)."""

    def function(self) -> dict[str, Any]:
        schema = self.input_schema or {"type": "object", "properties": {}}
        function: dict[str, Any] = {"name": self.name, "parameters": schema}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


def listed(server: str, tool: types.Tool) -> McpTool:
    safe = repeatable(tool.annotations)
    return McpTool(server, tool.name, tool.description or "", dict(tool.input_schema), safe)


async def list_tools(server: str) -> list[McpTool]:
    """Every tool `server` lists, all pages; RetryableError when it does not answer."""
    tools: list[McpTool] = []
    try:
        async with tasks_client(server) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(listed(server, tool) for tool in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
    except (OSError, MCPError, RuntimeError, ExceptionGroup) as exc:
        raise RetryableError(
            f"MCP server {server} did not list its tools ({_reason(exc)}): start it, or "
            "take it out of the agent's mcp_servers"
        ) from exc


async def call_tool(ctx: StepContext, call: McpCall) -> str:
    """Make `call` at most once unless it is safe to repeat; what the model is told."""
    polled = await ctx.recall(_TASK, type=str)
    if polled is not None:  # an earlier attempt started it as a task: wait for that one
        async with tasks_client(call.server) as client:
            return await _finish_task(client, call, polled)
    try:
        async with tasks_client(call.server) as client:
            sender = await ctx.once(_SENT, lambda: ctx.attempt, type=int)
            if sender != ctx.attempt and not call.safe:
                return unknown_outcome(call.tool)
            result = await client.session.call_tool(call.tool, call.arguments, allow_claimed=True)
            if isinstance(result, CreatedTask):
                task_id = result.task_id
                await ctx.once(_TASK, lambda: task_id, type=str)
                return await _finish_task(client, call, task_id)
            if not isinstance(result, types.CallToolResult):  # another claimed kind of result
                result = types.CallToolResult.model_validate(result.model_dump(by_alias=True))
            return result_text(result)
    except (OSError, MCPError, ExceptionGroup) as exc:
        # Told to the next attempt, which knows from the mark whether this one sent it.
        raise RetryableError(f"MCP tool {call.tool} on {call.server}: {_reason(exc)}") from exc


async def _finish_task(client: Any, call: McpCall, task_id: str) -> str:
    task = await wait_for_task(
        client, task_id, until=TERMINAL_STATUSES | {"input_required"}, timeout=TASK_TIMEOUT
    )
    if task["status"] == "input_required":
        await cancel_task(client, task_id)
        task = await get_task(client, task_id)
        return (
            f"Error: MCP tool {call.tool} asked for input, which this agent cannot give; "
            f"its task {task_id} was cancelled."
        )
    if "result" in task:
        return result_text(types.CallToolResult.model_validate(task["result"]))
    error = task.get("error") or {}
    message = error.get("message") or task.get("statusMessage") or task["status"]
    return f"Error: MCP tool {call.tool} {task['status']}: {message}"


def result_text(result: types.CallToolResult) -> str:
    """A tool's result as the model reads it: its structured content as JSON, else its
    text; an error as `Error: ...`."""
    if result.structured_content is not None:
        text = json.dumps(result.structured_content)
    else:
        parts = [
            block.text if isinstance(block, types.TextContent) else f"[{block.type}]"
            for block in result.content
        ]
        text = "\n".join(parts)
    return f"Error: {text}" if result.is_error else text


def _reason(exc: BaseException) -> str:
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
