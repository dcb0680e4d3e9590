"""Every failure of an API call as a typed error reply with a stable code."""

from __future__ import annotations

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
from tether.schemas.api import ApiError, ErrorCode, ErrorReply
from tether.schemas.ids import InvalidNameError

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


class InvalidRequestError(InvalidTaskError):
    """A request body that is not the verb's JSON shape."""


def error_reply(exc: BaseException) -> ErrorReply:
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
