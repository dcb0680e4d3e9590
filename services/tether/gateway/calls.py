"""`tools/list` and `tools/call`: every call is a Tether task, with or without a task handle.

2025-11-25: a call carrying `params.task` answers a `CreateTaskResult` at once (see
`LegacyTaskCalls`); a plain call waits for the task and answers its `CallToolResult`.
2026-07-28: a client that declared the tasks extension always gets a task handle
(`resultType: "task"`); any other client waits, and a question from the task comes
back as an `input_required` result whose `requestState` is the task id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from pydantic import ValidationError

from tether.gateway import errors
from tether.gateway.backend import TaskBackend
from tether.gateway.callers import caller_of
from tether.gateway.elicitation import follow
from tether.gateway.inputs import input_key, input_requests
from tether.gateway.notifications import LegacyPush
from tether.gateway.progress import token_progress
from tether.gateway.protocol import (
    IMMEDIATE_RESPONSE_META_KEY,
    TASK_RESULT_TYPE,
    declares_tasks,
    is_modern,
)
from tether.gateway.tasks import (
    as_created,
    failure_message,
    legacy_task,
    modern_task,
    tool_error,
    tool_result,
)
from tether.gateway.tools import RUN_PLAN, mcp_tool, run_plan_tool
from tether.schemas.records import TaskRecord, TaskStatus

Context = ServerRequestContext[Any, Any]


def direct_result(record: TaskRecord) -> dict[str, Any]:
    """The `CallToolResult` of a call made without a task, once the task ended or stalled."""
    if record.status is TaskStatus.COMPLETED:
        return tool_result(record.result)
    if record.status is TaskStatus.FAILED:
        return tool_error(failure_message(record))
    if record.status is TaskStatus.CANCELLED:
        return tool_error(f"task {record.task_id!r} was cancelled")
    prompt = record.input_request.prompt if record.input_request else "input"
    return tool_error(
        f"task {record.task_id!r} is waiting for input ({prompt}): call the tool as a task to "
        f"answer it, or run 'tether input {record.task_id} JSON'"
    )


class ToolCalls:
    def __init__(self, backend: TaskBackend, push: LegacyPush) -> None:
        self.backend = backend
        self.push = push

    @property
    def _poll_ms(self) -> int:
        return self.backend.options.poll_interval_ms

    async def list_tools(self, ctx: Context, params: types.PaginatedRequestParams) -> HandlerResult:
        legacy = not is_modern(ctx.protocol_version)
        advertised = await self.backend.client.served_tools()
        tools = [mcp_tool(info, legacy=legacy) for info in advertised if info.name != RUN_PLAN]
        return types.ListToolsResult(tools=[run_plan_tool(legacy=legacy), *tools])

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> HandlerResult:
        if not is_modern(ctx.protocol_version):
            if params.name == RUN_PLAN:
                raise errors.task_required(RUN_PLAN)
            record = await self.backend.submit(params.name, params.arguments, None, caller_of(ctx))
            async with token_progress(self.backend, ctx, record.task_id):
                ended = await follow(self.backend, ctx, record.task_id, give_up=True)
            return direct_result(ended)
        if params.request_state is not None:
            return await self._resume(ctx, params)
        if declares_tasks(ctx.session.client_capabilities):
            record = await self.backend.submit(params.name, params.arguments, None, caller_of(ctx))
            return {"resultType": TASK_RESULT_TYPE, **modern_task(record, self._poll_ms)}
        if params.name == RUN_PLAN:
            raise errors.missing_tasks_extension()
        record = await self.backend.submit(params.name, params.arguments, None, caller_of(ctx))
        async with token_progress(self.backend, ctx, record.task_id):
            return await self._direct_modern(record.task_id, set())

    async def _direct_modern(self, task_id: str, answered: set[str]) -> dict[str, Any]:
        record = await self.backend.settle(task_id, answered)
        if record.status is not TaskStatus.WAITING:
            return {"resultType": "complete", **direct_result(record)}
        return {
            "resultType": "input_required",
            "inputRequests": input_requests(record),
            "requestState": record.task_id,
        }

    async def _resume(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        """The retry of a plain 2026-07-28 call that was asked a question (MRTR)."""
        assert params.request_state is not None
        record = await self.backend.record(params.request_state, caller_of(ctx))
        key = input_key(record)
        answered: set[str] = set()
        for name, response in (params.input_responses or {}).items():
            if name == key and record.status is TaskStatus.WAITING:
                await self.backend.respond(record, response.model_dump(by_alias=True, mode="json"))
                answered.add(key)
        return await self._direct_modern(record.task_id, answered)

    async def create_legacy_task(self, ctx: Context) -> dict[str, Any]:
        """A 2025-11-25 task-augmented `tools/call`: the `CreateTaskResult`, at once."""
        try:
            params = types.CallToolRequestParams.model_validate(ctx.params or {}, by_name=False)
        except ValidationError as exc:
            raise errors.invalid_params(f"invalid tools/call params: {exc}") from None
        ttl = params.task.ttl if params.task is not None else None
        record = await self.backend.submit(params.name, params.arguments, ttl, caller_of(ctx))
        task = legacy_task(as_created(record), self._poll_ms)
        self.push.follow(ctx, record.task_id, task["status"])
        return {
            "task": task,
            "_meta": {
                IMMEDIATE_RESPONSE_META_KEY: f"Started durable task {record.task_id} "
                f"({params.name}); its result will be available when it completes."
            },
        }


class LegacyTaskCalls:
    """Middleware that answers 2025-11-25 task-augmented `tools/call` with a `CreateTaskResult`.

    A handler's `tools/call` result is validated against `CallToolResult`, which a
    `CreateTaskResult` is not; middleware results go to the wire as they are.
    """

    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls

    async def __call__(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and not is_modern(ctx.protocol_version)
            and isinstance(params, Mapping)
            and params.get("task") is not None
            and ctx.session.client_params is not None
        ):
            return await self.calls.create_legacy_task(ctx)
        return await call_next(ctx)
