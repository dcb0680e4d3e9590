"""MCP vocabulary the gateway speaks: identifiers, meta keys, request params, era checks."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from tether.mcp_tasks import TASKS_EXTENSION as TASKS_EXTENSION

"""SEP-2663: tasks as an extension of the 2026-07-28 protocol."""

RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE_META_KEY = "io.modelcontextprotocol/model-immediate-response"

TASK_RESULT_TYPE = "task"
"""`resultType` of a 2026-07-28 `CreateTaskResult`."""


class TaskIdParams(types.RequestParams):
    """Params of `tasks/get`, `tasks/result` and `tasks/cancel`."""

    task_id: str = Field(min_length=1)


class UpdateTaskParams(TaskIdParams):
    """Params of `tasks/update` (2026-07-28): answers keyed like the task's `inputRequests`."""

    input_responses: dict[str, dict[str, Any]]


class ListTasksParams(types.PaginatedRequestParams):
    """Params of `tasks/list` (2025-11-25)."""


def is_modern(protocol_version: str) -> bool:
    """True for the per-request-envelope era (2026-07-28), where tasks are an extension."""
    return protocol_version in MODERN_PROTOCOL_VERSIONS


def declares_tasks(capabilities: types.ClientCapabilities | None) -> bool:
    """Whether a 2026-07-28 request declared the tasks extension in its capabilities."""
    return bool(
        capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions
    )


def supports_form_elicitation(capabilities: types.ClientCapabilities | None) -> bool:
    """Whether a client accepts `elicitation/create` in form mode (an empty object means form)."""
    elicitation = capabilities.elicitation if capabilities else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


def related_task_meta(task_id: str) -> dict[str, Any]:
    return {RELATED_TASK_META_KEY: {"taskId": task_id}}
