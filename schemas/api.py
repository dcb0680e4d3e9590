"""Requests and replies of the request/reply API on `tether.api.<verb>`."""

from __future__ import annotations

from enum import Enum
from typing import Any

import msgspec

from schemas.tasks import ErrorInfo, StepSpec, TaskRecord, TaskStatus


class ErrorCode(str, Enum):
    """Stable error codes; clients in every language switch on these, never on messages."""

    NOT_FOUND = "not_found"
    INVALID = "invalid"
    CONFLICT = "conflict"
    ALREADY_EXISTS = "already_exists"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class ApiError(msgspec.Struct, frozen=True, kw_only=True):
    code: ErrorCode
    message: str


class ErrorReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ApiError


class SubmitRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Like `TaskSubmit`, but the id may be left out and is then generated."""

    steps: list[StepSpec]
    task_id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    deadline_ms: int | None = None


class SubmitReply(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str


class TaskRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`get`, `cancel` and `retry` name one task."""

    task_id: str


class ResultRequest(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    timeout_ms: int = 0


class ResultReply(msgspec.Struct, frozen=True, kw_only=True):
    """A finished task's outcome: `result` when completed, `error` when failed."""

    task_id: str
    status: TaskStatus
    result: Any = None
    error: ErrorInfo | None = None


class ListRequest(msgspec.Struct, frozen=True, kw_only=True):
    status: TaskStatus | None = None
    limit: int = 100
    cursor: str | None = None


class ListReply(msgspec.Struct, frozen=True, kw_only=True):
    tasks: list[TaskRecord]
    next_cursor: str | None = None


class InputAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a waiting task's input request."""

    task_id: str
    data: Any = None
