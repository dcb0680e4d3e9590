"""A tool's return value as the step's checkpoint (or why it cannot be one)."""

from __future__ import annotations

from typing import Any

import msgspec

from tether.clock import utcnow
from tether.durations import as_timedelta
from tether.errors import InvalidTaskError
from tether.schemas.codec import encode
from tether.schemas.tasks import Checkpoint, ErrorInfo, Usage
from tether.tasks.plans import validate_steps
from tether.tools.results import NextSteps, Sleep


class UnstorableResult(Exception):
    """A result no retry can fix: the step fails with `error`."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.error = ErrorInfo(type=type, message=message)


def checkpoint_of(
    result: Any, attempt: int, usage: Usage | None = None, build: str | None = None
) -> Checkpoint:
    """The step's checkpoint, its output encoded once: the checkpoint, the record, the
    next step's message and the event all embed those bytes (`msgspec.Raw`)."""
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
        raw = msgspec.Raw(encode(output))
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
    )
