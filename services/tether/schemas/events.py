"""Status events on `tether.status.<task_id>`: a tagged union on the `event` field."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from tether.schemas.records import ErrorInfo, InputRequest, TaskStatus, Usage


class StatusEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """Something that happened to a task; `status` is the task's status after it."""

    task_id: str
    status: TaskStatus
    step: int | None = None
    branch: int | None = None
    """Set on the events of one branch of a parallel step."""
    tool: str | None = None
    attempt: int | None = None
    time: datetime
    output: Any = None
    error: ErrorInfo | None = None
    generation: int = 1
    """The run of the task it belongs to: a retry starts a new generation, so an old run's
    `failed` is not the end of the task (events written before this field read as 1)."""
    build: str | None = None
    """On a step's events: the build of the worker that ran it (see `tether worker --build`)."""

    @property
    def kind(self) -> str:
        """The `event` tag: `submitted`, `step_started`, ..."""
        return str(type(self).__struct_config__.tag)


class Submitted(StatusEvent, frozen=True, kw_only=True, tag="submitted"):
    note: str | None = None
    """Why the task will not start yet: "no worker serves 's3' yet"."""


class StepStarted(StatusEvent, frozen=True, kw_only=True, tag="step_started"):
    worker: str | None = None
    """The id of the worker that runs it: a delivery of the step that comes back before
    that worker's first beat leaves the step to it while it is alive (`StepRun.holder`)."""


class StepCompleted(StatusEvent, frozen=True, kw_only=True, tag="step_completed"):
    skipped: bool = False
    """True when the output came from a checkpoint and the tool did not run again."""
    wake_at: datetime | None = None
    """Set when the step asked to sleep: the next step starts then."""
    usage: Usage | None = None
    """Model tokens the step spent (an LLM step)."""
    notes: list[str] | None = None
    """What the step said a user should know (`StepContext.note`)."""


class StepRetrying(StatusEvent, frozen=True, kw_only=True, tag="step_retrying"):
    retry_in_ms: int = 0


class Waiting(StatusEvent, frozen=True, kw_only=True, tag="waiting"):
    input_request: InputRequest | None = None


class MessageSent(StatusEvent, frozen=True, kw_only=True, tag="message_sent"):
    """A person (or a program) told a running agent something: the agent reads it before
    its next LLM call, once (`client.send_message`)."""

    text: str


class AgentUpdated(StatusEvent, frozen=True, kw_only=True, tag="agent_updated"):
    """A running agent's settings changed from its next LLM call on (`client.update_agent`);
    a field left null keeps its value."""

    model: str | None = None
    instructions: str | None = None
    token_budget: int | None = None


class Completed(StatusEvent, frozen=True, kw_only=True, tag="completed"):
    pass


class Failed(StatusEvent, frozen=True, kw_only=True, tag="failed"):
    pass


class Cancelled(StatusEvent, frozen=True, kw_only=True, tag="cancelled"):
    pass


AnyStatusEvent = (
    Submitted
    | StepStarted
    | StepCompleted
    | StepRetrying
    | Waiting
    | MessageSent
    | AgentUpdated
    | Completed
    | Failed
    | Cancelled
)

TERMINAL_EVENTS = (Completed, Failed, Cancelled)
Steering = MessageSent | AgentUpdated
"""What a running agent is told: also stored on `<prefix>.status.<task_id>.inbox`, where
the agent reads it."""


def ends_feed(event: StatusEvent, generation: int) -> bool:
    """Whether a follower of the task's run `generation` (the record's when it started
    following) has seen the last event: the end of that run or of a later one. The one
    rule for every follower, so a retried task is followed to its real end."""
    return isinstance(event, TERMINAL_EVENTS) and event.generation >= generation
