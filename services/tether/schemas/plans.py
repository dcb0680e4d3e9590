"""What a client submits: a plan of steps, its limits, and the task that runs it."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from tether.schemas.ids import TASK_ID_PATTERN, TOOL_NAME_PATTERN

MAX_STEPS = 1000
"""Steps in one submitted plan."""
MAX_BRANCHES = 1000
"""Branches in one parallel group."""
MAX_ATTEMPTS = 1000
MAX_BACKOFF_MS = 24 * 3600 * 1000
"""One day: the longest delay between two attempts."""
MAX_DURATION_MS = 366 * 24 * 3600 * 1000
"""A year and a day: the longest step timeout or task deadline."""


def _bounds(low: int, high: int) -> msgspec.Meta:
    """Bounds stated in the JSON Schemas; `tether.tasks.plans` enforces them with
    errors that name the task and step (a plain decode error would not)."""
    return msgspec.Meta(extra_json_schema={"minimum": low, "maximum": high})


TaskId = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": TASK_ID_PATTERN})]
ToolName = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": TOOL_NAME_PATTERN})]
Attempts = Annotated[int, _bounds(1, MAX_ATTEMPTS)]
BackoffMs = Annotated[int, _bounds(0, MAX_BACKOFF_MS)]
DurationMs = Annotated[int, _bounds(1, MAX_DURATION_MS)]


class RetryOverride(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Per-step overrides of the tool's retry policy; unset fields keep the tool's value."""

    max_attempts: Attempts | None = None
    initial_backoff_ms: BackoffMs | None = None
    max_backoff_ms: BackoffMs | None = None


class StepSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One step of a plan: a tool, or a parallel group of tool steps (its branches).

    A missing or null `input` means: the previous step's output (for a branch too).
    A group's output is the list of its branches' outputs, in branch order; with
    `collect_errors`, a branch that fails for good puts `{"error": {...}}` in its place
    instead of failing the task.
    """

    tool: ToolName | None = None
    input: Any = None
    timeout_ms: DurationMs | None = None
    retry: RetryOverride | None = None
    parallel: (
        Annotated[list[StepSpec], msgspec.Meta(min_length=1, max_length=MAX_BRANCHES)] | None
    ) = None
    collect_errors: bool = False

    def __post_init__(self) -> None:
        # Python callers write the JSON's shape (`retry={"max_attempts": 3}`) too.
        if isinstance(self.retry, dict):
            msgspec.structs.force_setattr(self, "retry", _as(RetryOverride, self.retry))
        if self.parallel is not None and any(isinstance(b, dict) for b in self.parallel):
            branches = [_as(StepSpec, b) if isinstance(b, dict) else b for b in self.parallel]
            msgspec.structs.force_setattr(self, "parallel", branches)

    def branch(self, branch: int | None) -> StepSpec:
        """The spec that runs: this step, or one branch of this group."""
        if branch is None:
            return self
        assert self.parallel is not None, "a branch of a step that is not a group"
        return self.parallel[branch]

    @property
    def label(self) -> str:
        """What to show for the step: its tool, or `parallel(search, fetch)`."""
        if self.parallel is None:
            return self.tool or "?"
        return "parallel(" + ", ".join(spec.label for spec in self.parallel) + ")"


_S = TypeVar("_S", bound=msgspec.Struct)


def _as(kind: type[_S], given: dict[str, Any]) -> _S:
    unknown = sorted(set(given) - set(kind.__struct_fields__))
    if unknown:
        fields = ", ".join(kind.__struct_fields__)
        raise TypeError(f"{kind.__name__} has no field {unknown[0]!r}: use {fields}")
    return msgspec.convert(given, kind)


Plan = Annotated[
    list[StepSpec], msgspec.Meta(extra_json_schema={"minItems": 1, "maxItems": MAX_STEPS})
]
"""A submitted plan: 1 to MAX_STEPS steps (a record's plan may grow past it)."""


class TaskSubmit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Published on `tether.submit.<task_id>` by any client; the publisher owns the task id."""

    task_id: TaskId
    steps: Plan
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    deadline_ms: DurationMs | None = None
    strict: bool = False
    """Reject the task at once when a tool of it has no worker; by default it is kept,
    pending, until a worker serves the tool (as a queue holds work for its consumer)."""
