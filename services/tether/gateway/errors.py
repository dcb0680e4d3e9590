"""The JSON-RPC errors the gateway answers with, named after what went wrong.

Both task specs use -32602 (invalid params) for an unknown task id and for cancelling a
finished task, -32601 (method not found) for a task-required tool called without a
task (2025-11-25), and -32021 (missing required client capability) when a 2026-07-28
client did not declare the tasks extension.
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)

from tether.gateway.protocol import TASKS_EXTENSION


def task_not_found(task_id: str) -> MCPError:
    return MCPError(
        INVALID_PARAMS,
        f"Failed to retrieve task: task {task_id!r} not found (check the id; "
        "tasks/list shows the known ones)",
    )


def invalid_params(message: str) -> MCPError:
    return MCPError(INVALID_PARAMS, message)


def unknown_tool(name: str) -> MCPError:
    return MCPError(
        INVALID_PARAMS,
        f"Unknown tool: {name!r} (no running worker serves it; tools/list shows the tools)",
    )


def method_not_found(method: str, version: str) -> MCPError:
    return MCPError(METHOD_NOT_FOUND, f"Method not found: {method} is not part of {version}")


def task_required(name: str) -> MCPError:
    return MCPError(
        METHOD_NOT_FOUND,
        f"tool {name!r} requires task augmentation: call it with params.task (taskSupport "
        "'required')",
    )


def missing_tasks_extension() -> MCPError:
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: declare the {TASKS_EXTENSION!r} extension",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def name_mismatch(task_id: str) -> MCPError:
    return MCPError(
        HEADER_MISMATCH, f"mcp-name header does not match the request's taskId {task_id!r}"
    )


def not_created(task_id: str, seconds: float) -> MCPError:
    return MCPError(
        INTERNAL_ERROR,
        f"task {task_id!r} was submitted but no dispatcher recorded it within {seconds:g}s: "
        "start one ('tether dispatcher'); the task starts when it does",
        data={"taskId": task_id},
    )
