"""A tool's return value as the step's checkpoint (or why it cannot be one)."""

from __future__ import annotations

from typing import Any

import msgspec

from tether.clock import utcnow
from tether.durations import as_timedelta
from tether.errors import InvalidTaskError, MessageTooLargeError
from tether.schemas import types
from tether.schemas.codec import encode
from tether.schemas.records import Checkpoint, ErrorInfo, Usage
from tether.tasks.plans import validate_steps
from tether.tools.results import Child, NeedsInput, NextSteps, Sleep

NOT_IN_A_BRANCH = ErrorInfo(
    type="InvalidOutput",
    message="a branch of a parallel step returned NextSteps: do that in the step after "
    "the group (a branch may return Child, NeedsInput or Sleep)",
)


def too_large(exc: MessageTooLargeError) -> ErrorInfo:
    return ErrorInfo(type="OutputTooLarge", message=f"the step's output does not fit: {exc}")


class UnstorableResult(Exception):
    """A result no retry can fix: the step fails with `error`."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.error = ErrorInfo(type=type, message=message)


class Noted(msgspec.Struct, frozen=True):
    """A step's output with what it said a user should know (`StepContext.note`)."""

    result: Any
    notes: list[str]


class NotedSteps(NextSteps, frozen=True, kw_only=True):
    """`NextSteps` with notes: still a `NextSteps` to every check (a branch refuses it)."""

    notes: list[str]


def noted(result: Any, notes: list[str]) -> Any:
    """`result`, carrying `notes` to its checkpoint when there are any. A result that
    makes no checkpoint of its own (a child task, a question, a sleep) drops them."""
    if not notes or isinstance(result, Child | NeedsInput | Sleep):
        return result
    if isinstance(result, NextSteps):
        return NotedSteps(steps=result.steps, output=result.output, after=result.after, notes=notes)
    return Noted(result, list(notes))


def checkpoint_of(
    result: Any, attempt: int, usage: Usage | None = None, build: str | None = None
) -> Checkpoint:
    """The step's checkpoint, its output encoded once: the checkpoint, the record, the
    next step's message and the event all embed those bytes (`msgspec.Raw`)."""
    notes = result.notes if isinstance(result, Noted | NotedSteps) else None
    if isinstance(result, Noted):
        result = result.result
    output, next_steps, wake_at = result, None, None
    if isinstance(result, Sleep):
        output, wake_at = result.output, utcnow() + result.duration
    if isinstance(result, NextSteps):
        try:
            validate_steps(result.steps, "next steps")
        except InvalidTaskError as exc:
            raise UnstorableResult("InvalidPlan", str(exc)) from exc
        output, next_steps = result.output, list(result.steps)
        if result.after is not None:
            wake_at = utcnow() + as_timedelta(result.after)
    try:
        raw = msgspec.Raw(_encoded(output))
    except (TypeError, msgspec.EncodeError) as exc:
        message = f"the step's output cannot be stored as JSON: {exc}"
        raise UnstorableResult("InvalidOutput", message) from exc
    return Checkpoint(
        output=raw,
        next_steps=next_steps,
        attempt=attempt,
        time=utcnow(),
        wake_at=wake_at,
        usage=usage,
        build=build,
        notes=notes,
    )


def _encoded(output: Any) -> bytes:
    """`output` as JSON; one holding a Pydantic model (which msgspec cannot encode) is
    dumped first, only then, so the usual output pays for nothing."""
    try:
        return encode(output)
    except TypeError:
        return encode(types.to_builtins(output))  # raises TypeError again for the rest
