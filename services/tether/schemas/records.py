"""What is stored of a task: its record, the checkpoint of each completed step, and the
status, errors, input requests and token usage they hold."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

import msgspec

from tether.schemas.plans import StepSpec


class TaskStatus(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Why a step or task failed: the exception type and a readable message."""

    type: str
    message: str
    traceback: str | None = None
    """Where a tool's exception came from: the innermost frames of its traceback, cut to
    a few KB (no local values: only what the traceback itself shows)."""


class InputRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a waiting task asks for: a prompt and a JSON Schema for the answer;
    `expires_at`: unanswered by then, the task fails with `InputExpired`, or, with a
    `default`, goes on with that as the answer."""

    prompt: str
    schema: dict[str, Any] = msgspec.field(default_factory=dict)
    expires_at: datetime | None = None
    default: Any | msgspec.UnsetType = msgspec.UNSET


class ParentStep(msgspec.Struct, frozen=True, kw_only=True):
    """The step of another task that started this one and completes with its result."""

    task_id: str
    step: int
    generation: int = 1
    branch: int | None = None
    """Set when one branch of a parallel step started it (an agent's call of a sub-agent)."""
    build: str | None = None
    """The build that ran that step: until the child starts, it counts as started there,
    so a pinned sub-agent runs on its parent's code."""


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The value under `<task_id>` in `tether-tasks`; changed only by compare-and-set.

    `current_step` is the step running or next to run; it equals `plan_length` once
    every step has completed. The record keeps only the plan from the last completed
    step on (`steps[0]` is step `done_steps`): an agent that runs 500 turns writes as
    many bytes per turn at turn 500 as at turn 1. Finished steps live on in their
    checkpoints (each holds the step it ran) and in the events.
    """

    task_id: str
    status: TaskStatus
    steps: list[StepSpec]
    done_steps: int = 0
    """How many steps left the front of `steps`."""
    current_step: int = 0
    result: Any = None
    error: ErrorInfo | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    deadline_at: datetime | None = None
    failed_step: int | None = None
    failed_branch: int | None = None
    """The branch of `failed_step` (a parallel group) whose failure failed the task."""
    failed_attempt: int | None = None
    """The attempt of `failed_step` that gave up; None when no attempt did (a deadline, a
    child, a rejected message). A redelivery of that attempt's message replays `failed`."""
    input_request: InputRequest | None = None
    generation: int = 1
    submit_seq: int = 0
    done_branches: list[int] = msgspec.field(default_factory=list)
    """Branches of the current step (a parallel group) that are checkpointed."""
    wake_at: datetime | None = None
    """The task sleeps: `current_step` starts at this time (a scheduled message)."""
    parent: ParentStep | None = None
    """Set on a child task: the step its result completes."""
    children: list[str] = msgspec.field(default_factory=list)
    """Every child task this task started (cancelling it cancels them)."""
    starting: list[str] = msgspec.field(default_factory=list)
    """Child tasks being started, listed before their record exists so that ending this
    task reaches them; each moves to `children` once created."""
    awaiting: str | None = None
    """The child task the current step waits for (no worker holds the step meanwhile)."""
    usage: Usage | None = None
    """Model tokens of every step, summed: completed ones (their checkpoints'), and the
    attempts no checkpoint keeps (failed, retried, cancelled while they ran)."""
    trace: dict[str, str] | None = None
    """The task's W3C trace context (`traceparent`, `tracestate`), from its submission."""
    note: str | None = None
    """Why a pending task has not started: "no worker serves 's3' yet"."""
    build: str | None = None
    """The build of the worker that started the task (ran its first step)."""
    notes: list[str] = msgspec.field(default_factory=list)
    """What its steps said a user should know, in order (`StepContext.note`): a model
    that could not see its tools, ..."""

    @property
    def plan_length(self) -> int:
        """Steps in the whole plan, finished ones included."""
        return self.done_steps + len(self.steps)

    def has_step(self, step: int) -> bool:
        """Whether the record still holds step `step` (0-based, absolute)."""
        return self.done_steps <= step < self.plan_length

    def spec(self, step: int) -> StepSpec:
        """Step `step` of the plan (absolute index); it must be one the record holds."""
        if not self.has_step(step):
            raise IndexError(f"step {step} is not in the record (it holds {self.done_steps}..)")
        return self.steps[step - self.done_steps]


class Usage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Model tokens spent: by one LLM step (`requests` calls), or summed over a task,
    finished or not: a failed or cancelled attempt's calls count as well."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Of `input_tokens`, those the provider served from its prompt cache."""
    requests: int = 0
    """LLM calls sent, `unfinished` ones included."""
    model: str | None = None
    """The model that spent them (unset on a sum over several)."""
    cost_usd: float | None = None
    """What they cost, in dollars; None when unknown: some call that spent tokens had no
    price (see agents.budget). A sum is unknown when any part with tokens is."""
    unfinished: int = 0
    """Of `requests`, calls cut off before they said what they spent (their worker was
    killed, the task cancelled, the step timed out): their tokens are unknown, not 0."""
    streamed_tokens: int = 0
    """Of `output_tokens`, those counted from the text a cut-off call had streamed (an
    estimate, about 4 characters a token): its answer so far, where the model never
    said what it spent."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            requests=self.requests + other.requests,
            model=self.model if self.model == other.model else None,
            cost_usd=_cost_sum(self, other),
            unfinished=self.unfinished + other.unfinished,
            streamed_tokens=self.streamed_tokens + other.streamed_tokens,
        )


def _cost_sum(one: Usage, other: Usage) -> float | None:
    """Known only when every part that spent tokens had a price; a part with no tokens
    (a cut-off call, a step that called no model) adds nothing either way."""
    parts = (one, other)
    if any(part.cost_usd is None and part.total_tokens > 0 for part in parts):
        return None
    known = [part.cost_usd for part in parts if part.cost_usd is not None]
    return sum(known) if known else None


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A completed step's output under `<task_id>.<step>` in `tether-checkpoints`.

    `next_steps` holds steps the tool added to the plan, so a redelivery that finds
    the checkpoint extends the plan exactly as the first holder would have.
    """

    output: Any = None
    next_steps: list[StepSpec] | None = None
    attempt: int = 1
    time: datetime
    spec: StepSpec | None = None
    """The step that produced this output: the task's history, once the record has
    let go of the step (and what `fork` re-runs)."""
    wake_at: datetime | None = None
    """The tool asked to sleep: the next step starts at this time."""
    usage: Usage | None = None
    """Model tokens the step reported (`StepContext.add_usage`)."""
    build: str | None = None
    """The build of the worker that ran the step."""
    notes: list[str] | None = None
    """What the step said a user should know (`StepContext.note`)."""
