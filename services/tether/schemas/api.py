"""Requests and replies of the request/reply API on `tether.api.<verb>`, and its error
replies both ways: an exception as a reply (`error_reply`), a reply as the exception
the same call raises in process (`raised`)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import msgspec

from tether.errors import (
    BlobNotFoundError,
    InvalidTaskError,
    NatsUnavailableError,
    TaskConflictError,
    TaskExistsError,
    TaskNotFoundError,
    TaskTimeoutError,
    TetherError,
)
from tether.schemas.ids import InvalidNameError
from tether.schemas.plans import DurationMs, Plan, TaskId
from tether.schemas.records import ErrorInfo, TaskRecord, TaskStatus

MAX_RESULT_WAIT_MS = 24 * 3600 * 1000
MAX_LIST = 1000


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


_CODES: list[tuple[type[BaseException] | tuple[type[BaseException], ...], ErrorCode]] = [
    ((TaskNotFoundError, BlobNotFoundError), ErrorCode.NOT_FOUND),
    (TaskExistsError, ErrorCode.ALREADY_EXISTS),
    (TaskConflictError, ErrorCode.CONFLICT),
    (TaskTimeoutError, ErrorCode.TIMEOUT),
    (
        (InvalidTaskError, InvalidNameError, msgspec.ValidationError, msgspec.DecodeError),
        ErrorCode.INVALID,
    ),
    (NatsUnavailableError, ErrorCode.UNAVAILABLE),
]


def error_reply(exc: BaseException) -> ErrorReply:
    """Every failure of an API call as a typed error reply with a stable code."""
    for kinds, code in _CODES:
        if isinstance(exc, kinds):
            return ErrorReply(error=ApiError(code=code, message=str(exc) or type(exc).__name__))
    return ErrorReply(
        error=ApiError(code=ErrorCode.INTERNAL, message=f"{type(exc).__name__}: {exc}")
    )


def raised(reply: ErrorReply, task_id: str) -> TetherError:
    """The other way: an error reply as the exception the same call raises in process."""
    code, message = reply.error.code, reply.error.message
    if code is ErrorCode.NOT_FOUND:
        return TaskNotFoundError(task_id)
    if code is ErrorCode.CONFLICT:
        return TaskConflictError(task_id, message)
    if code is ErrorCode.ALREADY_EXISTS:
        return TaskExistsError(task_id)
    if code is ErrorCode.TIMEOUT:
        return TaskTimeoutError(task_id, message)
    if code is ErrorCode.INVALID:
        return InvalidTaskError(message)
    if code is ErrorCode.UNAVAILABLE:
        return NatsUnavailableError(message)
    return TetherError(message)


class SubmitRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Like `TaskSubmit`, but the id may be left out and is then generated."""

    steps: Plan
    task_id: TaskId | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    deadline_ms: DurationMs | None = None
    strict: bool = False
    """As `TaskSubmit.strict`: an error reply when a tool has no worker."""


class SubmitReply(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str


class TaskRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`get`, `cancel` and `retry` name one task."""

    task_id: str


class ForkRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`fork`: a new task that reuses `task_id`'s checkpoints before `from_step` and runs
    from there; `input` (if not null) replaces that step's input."""

    task_id: str
    from_step: Annotated[int, msgspec.Meta(ge=0)] = 0
    input: Any = None
    new_task_id: TaskId | None = None


class ContinueRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`continue`: ask the completed agent task `task_id` a follow-up. A new task whose
    conversation starts with that one's, by reference; `agent` answers (default: the
    agent that answered `task_id`)."""

    task_id: str
    input: str | list[dict[str, Any]]
    agent: str | None = None
    new_task_id: TaskId | None = None
    token_budget: Annotated[int, msgspec.Meta(ge=1)] | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    deadline_ms: DurationMs | None = None


class MessageRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`message`: tell the running agent task `task_id` something; it reads it before its
    next LLM call, once. `message_id` makes a repeat of the same request a no-op."""

    task_id: str
    text: str
    message_id: TaskId | None = None


class UpdateAgentRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`update_agent`: change a running agent task's model, instructions or token budget
    from its next LLM call on (a field left out keeps its value)."""

    task_id: str
    model: str | None = None
    instructions: str | None = None
    token_budget: Annotated[int, msgspec.Meta(ge=1)] | None = None
    update_id: TaskId | None = None


class BlobRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`blob`: the value a reference names (`ref` is its `"$blob"`, `sha256:<hex>`)."""

    ref: str


class BlobReply(msgspec.Struct, frozen=True, kw_only=True):
    ref: str
    data: Any = None


class ResultRequest(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    timeout_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_RESULT_WAIT_MS)] = 0


class ResultReply(msgspec.Struct, frozen=True, kw_only=True):
    """A finished task's outcome: `result` when completed, `error` when failed."""

    task_id: str
    status: TaskStatus
    result: Any = None
    error: ErrorInfo | None = None


class ListRequest(msgspec.Struct, frozen=True, kw_only=True):
    status: TaskStatus | None = None
    limit: Annotated[int, msgspec.Meta(extra_json_schema={"minimum": 1, "maximum": MAX_LIST})] = 100
    cursor: str | None = None


class ListReply(msgspec.Struct, frozen=True, kw_only=True):
    """`omitted`: tasks on this page whose records are too large for a reply (records
    written before Tether bounded them); the page goes on past them."""

    tasks: list[TaskRecord]
    next_cursor: str | None = None
    omitted: list[str] = msgspec.field(default_factory=list)


class InputAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a waiting task's input request."""

    task_id: str
    data: Any = None
