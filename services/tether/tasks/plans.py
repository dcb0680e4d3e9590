"""Plans as submitted (pure, no I/O): the checks every role shares (dispatcher, client,
API, gateway, worker), and the ways the SDK accepts a step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.errors import InvalidTaskError
from tether.schemas.ids import InvalidNameError, validate_task_id, validate_tool_name
from tether.schemas.plans import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    MAX_BRANCHES,
    MAX_DURATION_MS,
    MAX_STEPS,
    StepSpec,
    TaskSubmit,
)
from tether.schemas.records import TaskRecord

MAX_DEADLINE_MS = MAX_DURATION_MS


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
        if spec.parallel is None:
            _validate_tool_step(spec, f"{where}, step {index}")
            continue
        own = (spec.tool, spec.input, spec.timeout_ms, spec.retry)
        if any(value is not None for value in own):
            raise InvalidTaskError(
                f"{where}, step {index}: a parallel group takes only 'parallel' and "
                "'collect_errors'; put tool, input, timeout_ms and retry on its branches"
            )
        if not 1 <= len(spec.parallel) <= MAX_BRANCHES:
            raise InvalidTaskError(
                f"{where}, step {index}: a parallel group has 1 to {MAX_BRANCHES} branches"
            )
        for branch, branch_spec in enumerate(spec.parallel):
            if branch_spec.parallel is not None:
                raise InvalidTaskError(
                    f"{where}, step {index}, branch {branch}: groups do not nest; "
                    "run the inner group as a step of its own"
                )
            _validate_tool_step(branch_spec, f"{where}, step {index}, branch {branch}")


def tools_of(steps: Sequence[StepSpec]) -> set[str]:
    """Every tool a plan names, its branches' included."""
    specs = [branch for spec in steps for branch in (spec.parallel or [spec])]
    return {spec.tool for spec in specs if spec.tool is not None}


def _validate_tool_step(spec: StepSpec, where: str) -> None:
    if spec.tool is None:
        raise InvalidTaskError(f"{where}: give a 'tool' (or 'parallel': a list of steps)")
    if spec.collect_errors:
        raise InvalidTaskError(f"{where}: 'collect_errors' belongs on a parallel group")
    try:
        validate_tool_name(spec.tool)
    except InvalidNameError as exc:
        raise InvalidTaskError(f"{where}: {exc}") from exc
    problem = _override_problem(spec)
    if problem:
        raise InvalidTaskError(f"{where} ({spec.tool}): {problem}")


def _override_problem(spec: StepSpec) -> str | None:
    if spec.timeout_ms is not None:
        if spec.timeout_ms <= 0:
            return "timeout_ms must be positive"
        if spec.timeout_ms > MAX_DURATION_MS:
            return f"timeout_ms must be at most {MAX_DURATION_MS} (a year and a day)"
    retry = spec.retry
    if retry is None:
        return None
    if retry.max_attempts is not None and not 1 <= retry.max_attempts <= MAX_ATTEMPTS:
        return f"retry.max_attempts must be between 1 and {MAX_ATTEMPTS}"
    for name in ("initial_backoff_ms", "max_backoff_ms"):
        value = getattr(retry, name)
        if value is not None and not 0 <= value <= MAX_BACKOFF_MS:
            return f"retry.{name} must be between 0 and {MAX_BACKOFF_MS} (one day)"
    return None


def to_step(step: StepSpec | dict[str, Any] | str) -> StepSpec:
    """Accept a StepSpec, a `{"tool": ..., "input": ...}` dict or a bare tool name."""
    if isinstance(step, StepSpec):
        return step
    if isinstance(step, str):
        return StepSpec(tool=step)
    try:
        spec = msgspec.convert(step, StepSpec)
    except msgspec.ValidationError as exc:
        raise InvalidTaskError(f"invalid step {step!r}: {exc}") from exc
    if spec.tool is None and spec.parallel is None:
        raise InvalidTaskError(f"invalid step {step!r}: give a 'tool' (or 'parallel': steps)")
    return spec


def Parallel(*branches: StepSpec | dict[str, Any] | str, collect_errors: bool = False) -> StepSpec:
    """A parallel step: its branches run at once, on any workers, and the next step gets
    their outputs as a list in branch order (`collect_errors`: a branch that fails for
    good leaves `{"error": {...}}` in its place instead of failing the task)."""
    return StepSpec(
        parallel=[to_step(branch) for branch in branches], collect_errors=collect_errors
    )


def task_id_of(data: bytes) -> str | None:
    """The task id of an undecodable submission, if it has a usable one."""
    try:
        raw = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    task_id = raw.get("task_id") if isinstance(raw, dict) else None
    try:
        return validate_task_id(task_id)
    except InvalidNameError:
        return None


def current_tool(record: TaskRecord) -> str:
    """The agent or tool of the task's current step (its last, once finished)."""
    if not record.steps:
        return "-"
    return record.spec(min(record.current_step, record.plan_length - 1)).label
