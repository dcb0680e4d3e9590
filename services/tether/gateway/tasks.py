"""Tether task records as MCP tasks, for both generations (pure: no I/O).

2025-11-25 (the tasks utility) names the timing fields `ttl` and `pollInterval`;
2026-07-28 (the `io.modelcontextprotocol/tasks` extension) names them `ttlMs` and
`pollIntervalMs` and inlines `result`, `error` or `inputRequests` into a detailed task.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

import msgspec

from tether.agents.owners import MCP_METADATA_KEY, bound_owner
from tether.gateway.callers import public_key, sealed_by_hmac
from tether.gateway.inputs import input_requests
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.workers import Heartbeat
from tether.tasks.stalls import Stall

_STATUS = {
    TaskStatus.PENDING: "working",
    TaskStatus.RUNNING: "working",
    TaskStatus.WAITING: "input_required",
    TaskStatus.COMPLETED: "completed",
    TaskStatus.FAILED: "failed",
    TaskStatus.CANCELLED: "cancelled",
}


def owner(record: TaskRecord, key: bytes | None) -> str | None:
    """The caller an MCP task is bound to: None when it was created with no token, not by
    MCP, or by anyone but a gateway holding `key` (see `callers.seal`). The check is the
    workers' (`owners.bound_owner`), with the key this gateway's own."""
    if key is None:
        return None
    bound = bound_owner(record.task_id, record.metadata)
    if bound is None:
        return None
    if bound.key == public_key(key):
        return bound.caller
    requested = record.metadata[MCP_METADATA_KEY]
    if "key" not in requested and sealed_by_hmac(
        key, record.task_id, bound.caller, requested.get("seal")
    ):
        return bound.caller
    return None


def mcp_status(status: TaskStatus) -> str:
    """pending/running → working, waiting → input_required, the terminal three unchanged."""
    return _STATUS[status]


def modern_status(status: TaskStatus) -> str:
    """As `mcp_status`, except that a failed task is `completed` in 2026-07-28.

    The extension keeps `failed` for a JSON-RPC error of the request itself; a tool that
    failed is a completed call whose result has `isError: true` (SEP-2663). Tether's
    failures are all of the second kind: the call was made, the tool gave up.
    """
    return "completed" if status is TaskStatus.FAILED else _STATUS[status]


def ttl_ms(record: TaskRecord) -> int | None:
    """The retention the client asked for; None (unlimited) when it asked for none."""
    requested = record.metadata.get(MCP_METADATA_KEY, {})
    value = requested.get("ttl_ms") if isinstance(requested, dict) else None
    return value if isinstance(value, int) and value >= 0 else None


def timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with a `Z`, as both generations require."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Whereabouts(NamedTuple):
    """What the task's record does not say: the running step's progress, and what a task
    that is not moving waits for."""

    heartbeat: Heartbeat | None = None
    stall: Stall | None = None


def status_message(record: TaskRecord, where: Whereabouts | None = None) -> str:
    """A short human-readable account of where the task is."""
    heartbeat, stall = where or Whereabouts()
    if stall is not None:
        return stall.message
    if record.status is TaskStatus.PENDING:
        return "queued: waiting for a worker"
    if record.status is TaskStatus.WAITING and record.input_request is not None:
        return record.input_request.prompt
    if record.status is TaskStatus.FAILED:
        return failure_message(record)
    if record.status is TaskStatus.CANCELLED:
        return "the task was cancelled"
    if record.status is TaskStatus.COMPLETED:
        return "the task completed"
    return _running_message(record, heartbeat)


def _running_message(record: TaskRecord, heartbeat: Heartbeat | None) -> str:
    step = record.current_step
    total = record.plan_length
    tool = record.spec(step).label if record.has_step(step) else "?"
    message = f"step {step} ({tool}) of {total} running"
    if heartbeat is not None and heartbeat.step == step:
        if heartbeat.progress is not None:
            message += f", {heartbeat.progress:.0%}"
        if heartbeat.message:
            message += f": {heartbeat.message}"
    return message


def _base(record: TaskRecord, where: Whereabouts | None) -> dict[str, Any]:
    return {
        "taskId": record.task_id,
        "status": mcp_status(record.status),
        "statusMessage": status_message(record, where),
        "createdAt": timestamp(record.created_at),
        "lastUpdatedAt": timestamp(record.updated_at),
    }


def as_created(record: TaskRecord) -> TaskRecord:
    """The record as it was when the task was created.

    A 2025-11-25 task MUST begin `working`, but a fast task may be further along by the
    time the gateway has read its record back; the creation result shows its beginning.
    """
    return msgspec.structs.replace(
        record,
        status=TaskStatus.PENDING,
        current_step=0,
        result=None,
        error=None,
        input_request=None,
        failed_step=None,
        updated_at=record.created_at,
    )


def legacy_task(
    record: TaskRecord, poll_interval_ms: int, where: Whereabouts | None = None
) -> dict[str, Any]:
    """A 2025-11-25 `Task`."""
    return {**_base(record, where), "ttl": ttl_ms(record), "pollInterval": poll_interval_ms}


def modern_task(
    record: TaskRecord, poll_interval_ms: int, where: Whereabouts | None = None
) -> dict[str, Any]:
    """A 2026-07-28 `Task` (the shape of `CreateTaskResult` without its `resultType`)."""
    task = {**_base(record, where), "status": modern_status(record.status)}
    return {**task, "ttlMs": ttl_ms(record), "pollIntervalMs": poll_interval_ms}


def detailed_task(
    record: TaskRecord, poll_interval_ms: int, where: Whereabouts | None = None
) -> dict[str, Any]:
    """A 2026-07-28 `DetailedTask`: the task plus its result, error or input requests."""
    task = modern_task(record, poll_interval_ms, where)
    if record.status is TaskStatus.COMPLETED:
        task["result"] = tool_result(record.result)
    elif record.status is TaskStatus.FAILED:
        task["result"] = tool_error(failure_message(record))
    elif record.status is TaskStatus.WAITING:
        task["inputRequests"] = input_requests(record)
    return task


def tool_result(result: Any) -> dict[str, Any]:
    """A completed task's result as a `CallToolResult`: structured content plus its JSON as text.

    `structuredContent` must be an object, so any other result is wrapped as `{"result": ...}`.
    """
    structured = result if isinstance(result, dict) else {"result": result}
    text = msgspec.json.encode(result).decode()
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
    }


def tool_error(message: str) -> dict[str, Any]:
    """A `CallToolResult` that reports a tool failure to the model."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


def failure_message(record: TaskRecord) -> str:
    error = record.error
    step = record.failed_step
    where = ""
    if step is not None and record.has_step(step):
        where = f" at step {step} ({record.spec(step).label})"
    detail = f"{error.type}: {error.message}" if error else "unknown error"
    return f"task {record.task_id!r} failed{where}: {detail}"
