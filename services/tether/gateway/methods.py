"""The `tasks/*` methods of both generations, answered from the task records.

2025-11-25: `tasks/get`, `tasks/result` (blocks until the task ends, asking the client
for input on the way), `tasks/list`, `tasks/cancel`. 2026-07-28 (tasks extension):
`tasks/get` (a detailed task), `tasks/update` (answers to `inputRequests`),
`tasks/cancel`; the client must have declared the extension.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value

from tether.client.reads import position_of
from tether.gateway import errors
from tether.gateway.backend import TaskBackend
from tether.gateway.callers import caller_of
from tether.gateway.elicitation import follow
from tether.gateway.inputs import input_key
from tether.gateway.notifications import LegacyPush
from tether.gateway.protocol import (
    ListTasksParams,
    TaskIdParams,
    UpdateTaskParams,
    declares_tasks,
    is_modern,
    related_task_meta,
)
from tether.gateway.tasks import (
    detailed_task,
    failure_message,
    legacy_task,
    mcp_status,
    tool_error,
    tool_result,
)
from tether.schemas.records import TaskRecord, TaskStatus

Context = ServerRequestContext[Any, Any]
PAGE_SIZE = 100


def _legacy_only(ctx: Context) -> None:
    if is_modern(ctx.protocol_version):
        raise errors.method_not_found(ctx.method, ctx.protocol_version)


def _modern_only(ctx: Context) -> None:
    if not is_modern(ctx.protocol_version):
        raise errors.method_not_found(ctx.method, ctx.protocol_version)


def _check_modern(ctx: Context, task_id: str) -> None:
    """2026-07-28: the extension must be declared, and `Mcp-Name` (when sent) must be the id."""
    if not declares_tasks(ctx.session.client_capabilities):
        raise errors.missing_tasks_extension()
    headers = getattr(ctx.request, "headers", None)
    name = headers.get(MCP_NAME_HEADER) if headers is not None else None
    if name is not None and decode_header_value(name) != task_id:
        raise errors.name_mismatch(task_id)


def final_result(record: TaskRecord) -> dict[str, Any]:
    """What the `tools/call` would have returned: `tasks/result` of an ended task."""
    if record.status is TaskStatus.CANCELLED:
        raise errors.invalid_params(f"task {record.task_id!r} was cancelled: it has no result")
    if record.status is TaskStatus.COMPLETED:
        result = tool_result(record.result)
    else:
        result = tool_error(failure_message(record))
    return {**result, "_meta": related_task_meta(record.task_id)}


def _position(cursor: str) -> tuple[int, str]:
    stamp, _, task_id = cursor.partition(".")
    if not (stamp.isdecimal() and task_id):
        raise errors.invalid_params(f"invalid cursor {cursor!r}: pass a nextCursor from tasks/list")
    return int(stamp), task_id


SCAN = 2_000
"""Other callers' tasks `tasks/list` reads past at most for one page."""


class TaskMethods:
    def __init__(self, backend: TaskBackend, push: LegacyPush) -> None:
        self.backend = backend
        self.push = push

    @property
    def _poll_ms(self) -> int:
        return self.backend.options.poll_interval_ms

    async def get_task(self, ctx: Context, params: TaskIdParams) -> HandlerResult:
        modern = is_modern(ctx.protocol_version)
        if modern:
            _check_modern(ctx, params.task_id)
        record = await self.backend.record(params.task_id, caller_of(ctx))
        where = await self.backend.whereabouts(record)
        if modern:
            return detailed_task(record, self._poll_ms, where)
        task = legacy_task(record, self._poll_ms, where)
        self.push.follow(ctx, record.task_id, task["status"])
        return task

    async def get_result(self, ctx: Context, params: TaskIdParams) -> HandlerResult:
        _legacy_only(ctx)
        await self.backend.record(params.task_id, caller_of(ctx))
        record = await follow(self.backend, ctx, params.task_id, give_up=False)
        return final_result(record)

    async def list_tasks(self, ctx: Context, params: ListTasksParams) -> HandlerResult:
        _legacy_only(ctx)
        page, cursor = await self._page(caller_of(ctx), params.cursor)
        answer: dict[str, Any] = {"tasks": [legacy_task(r, self._poll_ms) for r in page]}
        if cursor is not None:
            answer["nextCursor"] = cursor
        return answer

    async def _page(
        self, caller: str | None, cursor: str | None
    ) -> tuple[list[TaskRecord], str | None]:
        """A page of the caller's tasks after the position `cursor` names, and the next
        cursor: read from the status index a page at a time, never every record. A cursor
        is a position (`<µs>.<task id>`), not a task to look up: it reveals nothing about
        another caller's tasks, and may point past them."""
        client = self.backend.client
        after = None if cursor is None else _position(cursor)
        page: list[TaskRecord] = []
        scanned, more = 0, True
        while more and len(page) < PAGE_SIZE and scanned < SCAN:
            records, more = await client.list_page(limit=PAGE_SIZE, after=after)
            for record in records:
                scanned += 1
                after = position_of(record)
                if caller is None or self.backend.owner(record) == caller:
                    page.append(record)
                    if len(page) == PAGE_SIZE:
                        more = more or record is not records[-1]
                        break
        return page, f"{after[0]}.{after[1]}" if more and after is not None else None

    async def cancel_task(self, ctx: Context, params: TaskIdParams) -> HandlerResult:
        modern = is_modern(ctx.protocol_version)
        if modern:
            _check_modern(ctx, params.task_id)
        cancelled = await self.backend.cancel(params.task_id, caller_of(ctx))
        if modern:  # an acknowledgement; a task that had ended simply stays as it was
            return {}
        if cancelled is None:
            record = await self.backend.record(params.task_id, caller_of(ctx))
            status = mcp_status(record.status)
            raise errors.invalid_params(
                f"Cannot cancel task: already in terminal status {status!r}"
            )
        return legacy_task(cancelled, self._poll_ms)

    async def update_task(self, ctx: Context, params: UpdateTaskParams) -> HandlerResult:
        _modern_only(ctx)
        _check_modern(ctx, params.task_id)
        record = await self.backend.record(params.task_id, caller_of(ctx))
        response = params.input_responses.get(input_key(record))
        # Keys that are not outstanding (answered, superseded, unknown) are ignored.
        if record.status is TaskStatus.WAITING and response is not None:
            await self.backend.respond(record, response)
        return {}
