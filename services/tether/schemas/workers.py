"""What workers write of themselves: their beats, the steps they hold and run, and the
tools they serve."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec


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
    answers: bool = False
    """It answers on `<prefix>.worker.<worker key>.alive`: when its beat is late it is asked
    there, and "no responders" has its held steps run elsewhere at once. A worker that does
    not say so is judged by its beats alone (silent for `dead_after`: dead)."""


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
