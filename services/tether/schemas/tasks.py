"""Tasks, steps and the messages that carry them between processes."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from tether.schemas.ids import TASK_ID_PATTERN, TOOL_NAME_PATTERN
from tether.schemas.runs import StepRun as StepRun

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
    """Bounds stated in the JSON Schemas; `tether.tasks.rules` enforces them with
    errors that name the task and step (a plain decode error would not)."""
    return msgspec.Meta(extra_json_schema={"minimum": low, "maximum": high})


TaskId = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": TASK_ID_PATTERN})]
ToolName = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": TOOL_NAME_PATTERN})]
Attempts = Annotated[int, _bounds(1, MAX_ATTEMPTS)]
BackoffMs = Annotated[int, _bounds(0, MAX_BACKOFF_MS)]
DurationMs = Annotated[int, _bounds(1, MAX_DURATION_MS)]


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


class TaskSubmit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Published on `tether.submit.<task_id>` by any client; the publisher owns the task id."""

    task_id: TaskId
    steps: Plan
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    deadline_ms: DurationMs | None = None
    strict: bool = False
    """Reject the task at once when a tool of it has no worker; by default it is kept,
    pending, until a worker serves the tool (as a queue holds work for its consumer)."""


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
    """Model tokens of every completed step, summed."""
    trace: dict[str, str] | None = None
    """The task's W3C trace context (`traceparent`, `tracestate`), from its submission."""
    note: str | None = None
    """Why a pending task has not started: "no worker serves 's3' yet"."""
    build: str | None = None
    """The build of the worker that started the task (ran its first step)."""

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


class TokenChunk(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A piece of a step's streamed text on `tether.tokens.<task_id>`.

    `seq` counts from 0 within one attempt of one step; the attempt's last chunk has
    `done` set. Chunks of a later attempt of the same step replace an earlier one's
    (which was cut off by a crash or an error).
    """

    task_id: str
    step: int
    attempt: int
    seq: int
    delta: str = ""
    branch: int | None = None
    done: bool = False
    stream_seq: int | None = None
    """Not on the wire: the chunk's sequence in the tokens stream, set by readers (resume
    after it)."""


class WorkMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One step (or one branch of a parallel step) to run, on `tether.work.<tool>`;
    `Nats-Msg-Id` is `<task_id>.<step>` (`<task_id>.<step>.b<branch>` for a branch)."""

    task_id: str
    step: Annotated[int, msgspec.Meta(ge=0)]
    tool: str
    input: Any = None
    generation: Annotated[int, msgspec.Meta(ge=1)] = 1
    branch: Annotated[int, msgspec.Meta(ge=0)] | None = None
    from_build: str | None = None
    """The build that ran the step whose output is this step's input (None: a first
    step, or a worker that names no build): a moving step goes to a newer build only
    when that build's tool takes what this one made."""


class Usage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Model tokens spent: by one LLM step (`requests` calls), or summed over a task."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Of `input_tokens`, those the provider served from its prompt cache."""
    requests: int = 0
    model: str | None = None
    """The model that spent them (unset on a sum over several)."""
    cost_usd: float = 0.0
    """What they cost, in dollars, where the model's price is known (see agents.budget)."""

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
            cost_usd=self.cost_usd + other.cost_usd,
        )


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


class Timer(msgspec.Struct, frozen=True, kw_only=True):
    """A timer that fired, on `<prefix>.work._timers`: the task's deadline, or the
    expiry of the input wait of `step` in `generation`."""

    task_id: str
    kind: Literal["deadline", "input"]
    step: int | None = None
    generation: int = 1


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """A running step's liveness and progress under `<task_id>` in `tether-heartbeats`."""

    task_id: str
    step: int
    tool: str
    attempt: int
    worker_id: str
    branch: int | None = None
    progress: float | None = None
    message: str | None = None
    time: datetime


class WorkerBeat(msgspec.Struct, frozen=True, kw_only=True):
    """A worker that is up, written under `<worker>` in `tether-workers` every
    half second: the liveness that decides when its held steps run elsewhere."""

    worker_id: str
    tools: list[str]
    concurrency: int
    in_flight: int = 0
    started_at: datetime
    time: datetime
    claimed_by: str | None = None
    """Set by the survivor that is handing this silent worker's steps on."""
    build: str | None = None
    """The build of the code the worker runs."""
    draining: bool = False
    """Stopping: it takes only the steps routed to its build (a drain, the default on SIGTERM)."""


class HeldStep(msgspec.Struct, frozen=True, kw_only=True):
    """A step its worker holds, under `<worker>.<Nats-Msg-Id>` in `tether-workers`: the
    work message it acknowledged, for a survivor to publish again if the worker dies."""

    subject: str
    msg_id: str
    attempt: int
    """The attempt that was running (the step's next message makes attempt + 1)."""
    work: msgspec.Raw
    """The `WorkMessage` as it came."""
    ack: str | None = None
    """The message's ack subject: a survivor acknowledges it too, in case the holder died
    between storing this and acknowledging the message itself."""


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """A message Tether gave up on, on `tether.dead.<tool>`.

    `data` is the original payload (base64 in JSON), cut to its first 64 KiB when
    larger; `size` is the original length.
    """

    tool: str
    task_id: str | None = None
    step: int | None = None
    branch: int | None = None
    attempt: int = 0
    error: ErrorInfo
    subject: str
    data: bytes
    size: int = 0
    time: datetime


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A tool a worker serves, advertised under its name in `tether-tools`."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    """What the tool returns, when it says (an agent with an `output_type`): an object."""
    agent: bool = False
    """The tool runs an agent's turns: it reads the messages sent to its tasks."""
    max_concurrency: int | None = None
    approval: bool = False
    """An agent asks a person before it runs this tool."""
    build: str | None = None
    """The build of the worker that registered it last."""
    updated_at: datetime
