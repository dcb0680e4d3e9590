"""The MCP server: the SDK's low-level `Server` with Tether's handlers registered.

The low-level server rather than `MCPServer` plus an `Extension`: the tool list is
read from the workers' advertisements on every `tools/list` (no tool functions live
in this process), and a 2025-11-25 `CreateTaskResult` answers `tools/call`, which
only middleware may do.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server

from tether.gateway.calls import LegacyTaskCalls, ToolCalls
from tether.gateway.methods import TaskMethods
from tether.gateway.notifications import TaskListen
from tether.gateway.protocol import (
    TASKS_EXTENSION,
    ListTasksParams,
    TaskIdParams,
    UpdateTaskParams,
    is_modern,
)

INSTRUCTIONS = (
    "Tools run as durable Tether tasks on NATS JetStream: call them as tasks, keep the task "
    "id, and poll tasks/get from any connection until the task ends; it survives "
    "disconnects and crashed workers. run_plan runs several tools as one task."
)

_LEGACY_TASKS = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(
        tools=types.TasksToolsCapability(call=types.TasksCallCapability())
    ),
)


def _version() -> str:
    try:
        return version("tether")
    except PackageNotFoundError:
        return "0"


class GatewayServer(Server[Any]):
    """Declares tasks per era: the `tasks` capability (2025-11-25) or the extension (2026-07-28)."""

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        modern = protocol_version is not None and is_modern(protocol_version)
        return capabilities.model_copy(
            update={
                # Tool changes are not pushed; clients list again.
                "tools": types.ToolsCapability(list_changed=False),
                "tasks": None if modern else _LEGACY_TASKS,
            }
        )


def build_server(calls: ToolCalls, methods: TaskMethods, listen: TaskListen) -> GatewayServer:
    server = GatewayServer(
        "tether",
        version=_version(),
        title="Tether",
        instructions=INSTRUCTIONS,
        # Tether schemas carry no `x-mcp-header` annotations: nothing to check per call.
        get_tool_input_schema=lambda name: None,
    )
    server.extensions[TASKS_EXTENSION] = {}
    server.add_request_handler("tools/list", types.PaginatedRequestParams, calls.list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, calls.call_tool)
    server.add_request_handler("tasks/get", TaskIdParams, methods.get_task)
    server.add_request_handler("tasks/result", TaskIdParams, methods.get_result)
    server.add_request_handler("tasks/list", ListTasksParams, methods.list_tasks)
    server.add_request_handler("tasks/cancel", TaskIdParams, methods.cancel_task)
    server.add_request_handler("tasks/update", UpdateTaskParams, methods.update_task)
    server.add_request_handler(
        "subscriptions/listen", types.SubscriptionsListenRequestParams, listen
    )
    server.middleware.append(LegacyTaskCalls(calls))
    return server
