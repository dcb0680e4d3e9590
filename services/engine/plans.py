"""Validation of submitted tasks (pure): what the dispatcher and the client both check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from schemas.ids import InvalidNameError, validate_task_id, validate_tool_name
from schemas.tasks import StepSpec, TaskSubmit
from services.errors import InvalidTaskError

MAX_STEPS = 1000
MAX_DEADLINE_MS = 366 * 24 * 3600 * 1000


def validate_submit(submit: TaskSubmit) -> None:
    """Raise InvalidTaskError saying what is wrong with the task."""
    try:
        validate_task_id(submit.task_id)
    except InvalidNameError as exc:
        raise InvalidTaskError(str(exc)) from exc
    if not submit.steps:
        raise InvalidTaskError(f"task {submit.task_id!r} has no steps: give at least one")
    if len(submit.steps) > MAX_STEPS:
        raise InvalidTaskError(
            f"task {submit.task_id!r} has {len(submit.steps)} steps; the limit is {MAX_STEPS}"
        )
    validate_steps(submit.steps, f"task {submit.task_id!r}")
    if submit.deadline_ms is not None and not 0 < submit.deadline_ms <= MAX_DEADLINE_MS:
        raise InvalidTaskError(
            f"task {submit.task_id!r}: deadline_ms must be between 1 and {MAX_DEADLINE_MS}"
        )


def validate_steps(steps: Sequence[StepSpec], where: str, first: int = 0) -> None:
    """Check each step's tool name and overrides; `where` prefixes the error message."""
    for index, spec in enumerate(steps, start=first):
        try:
            validate_tool_name(spec.tool)
        except InvalidNameError as exc:
            raise InvalidTaskError(f"{where}, step {index}: {exc}") from exc
        problem = _override_problem(spec)
        if problem:
            raise InvalidTaskError(f"{where}, step {index} ({spec.tool}): {problem}")


def _override_problem(spec: StepSpec) -> str | None:
    if spec.timeout_ms is not None and spec.timeout_ms <= 0:
        return "timeout_ms must be positive"
    retry = spec.retry
    if retry is None:
        return None
    if retry.max_attempts is not None and retry.max_attempts < 1:
        return "retry.max_attempts must be at least 1"
    for name in ("initial_backoff_ms", "max_backoff_ms"):
        value = getattr(retry, name)
        if value is not None and value < 0:
            return f"retry.{name} must not be negative"
    return None


def to_step(step: StepSpec | dict[str, Any] | str) -> StepSpec:
    """Accept a StepSpec, a `{"tool": ..., "input": ...}` dict or a bare tool name."""
    if isinstance(step, StepSpec):
        return step
    if isinstance(step, str):
        return StepSpec(tool=step)
    try:
        return msgspec.convert(step, StepSpec)
    except msgspec.ValidationError as exc:
        raise InvalidTaskError(f"invalid step {step!r}: {exc}") from exc


def task_id_of(data: bytes) -> str | None:
    """The task id of an undecodable submission, if it has a usable one."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    task_id = raw.get("task_id") if isinstance(raw, dict) else None
    try:
        return validate_task_id(task_id)
    except InvalidNameError:
        return None
