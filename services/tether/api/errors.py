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
