"""Validation of the names that become parts of subjects and keys."""

from __future__ import annotations

import re

from tether.errors import TetherError

MAX_TASK_ID_LENGTH = 128
MAX_TOOL_NAME_LENGTH = 64
MAX_SESSION_ID_LENGTH = 120
"""A task id's rule, shorter: a session's runs are tasks `<session id>-r<run>`."""

TASK_ID_PATTERN = f"^[A-Za-z0-9_-]{{1,{MAX_TASK_ID_LENGTH}}}$"
TOOL_NAME_PATTERN = f"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_TOOL_NAME_LENGTH - 1}}}$"
"""Both as the JSON Schemas state them; the checks below give errors that say why."""
_TASK_ID = re.compile(r"[A-Za-z0-9_-]+")
_TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class InvalidNameError(TetherError, ValueError):
    """A task id or tool name that cannot be used in a subject or key."""


def _describe(value: str) -> str:
    shown = value if len(value) <= 40 else value[:37] + "..."
    return repr(shown)


def validate_task_id(
    task_id: object, what: str = "task id", limit: int = MAX_TASK_ID_LENGTH
) -> str:
    """Return `task_id` if it is usable in subjects and keys, else raise InvalidNameError."""
    if not isinstance(task_id, str):
        raise InvalidNameError(f"{what} must be a string, got {type(task_id).__name__}")
    if not task_id:
        raise InvalidNameError(f"{what} is empty: use 1 to {limit} letters, digits, '-' or '_'")
    if len(task_id) > limit:
        raise InvalidNameError(
            f"{what} {_describe(task_id)} is {len(task_id)} characters long: the limit is {limit}"
        )
    if not _TASK_ID.fullmatch(task_id):
        raise InvalidNameError(
            f"{what} {_describe(task_id)} is not a valid id: "
            "use letters, digits, '-' or '_' (no '.', '*', '>' or spaces)"
        )
    return task_id


def validate_session_id(session_id: object) -> str:
    """A session id (the app's own chat id) as a task id's rule, at most 120 characters."""
    return validate_task_id(session_id, "session id", MAX_SESSION_ID_LENGTH)


def validate_message_id(message_id: object) -> str:
    """A message id a sender chose: one subject token, as a task id."""
    return validate_task_id(message_id, "message id")


def validate_tool_name(name: object) -> str:
    """Return `name` if it is a usable tool name, else raise InvalidNameError."""
    if not isinstance(name, str):
        raise InvalidNameError(f"tool name must be a string, got {type(name).__name__}")
    if not name or len(name) > MAX_TOOL_NAME_LENGTH or not _TOOL_NAME.fullmatch(name):
        raise InvalidNameError(
            f"tool name {_describe(name)} is not valid: use 1 to {MAX_TOOL_NAME_LENGTH} "
            "letters, digits, '-' or '_', starting with a letter or digit"
        )
    return name
