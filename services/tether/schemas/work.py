"""What carries a task between processes: its steps' work messages, their streamed text,
its timers, and what Tether gave up on."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from tether.schemas.records import ErrorInfo


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


class Timer(msgspec.Struct, frozen=True, kw_only=True):
    """A timer that fired, on `<prefix>.fired.<timer id>`: the task's deadline, or the
    expiry of the input wait of `step` in `generation`."""

    task_id: str
    kind: Literal["deadline", "input"]
    step: int | None = None
    generation: int = 1


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
