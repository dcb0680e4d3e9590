"""What a tool may return besides a plain value."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from tether.clock import utcnow
from tether.durations import as_timedelta
from tether.schemas import types
from tether.schemas.plans import StepSpec
from tether.schemas.records import InputRequest
from tether.tasks.plans import to_step


class NextSteps(msgspec.Struct, frozen=True, kw_only=True):
    """Finish this step with `output` and run `steps` right after it (an agent's next calls),
    or `after` that long (seconds or a timedelta), parked as a `Sleep` is."""

    steps: Sequence[StepSpec]
    output: Any = None
    after: timedelta | float | None = None


class Sleep:
    """Finish this step with `output` and start the next one `duration` from now.

    The task parks in JetStream (a scheduled message), holding no worker slot and no
    unacknowledged message, and wakes on time even if every process and the server
    restarted in between. On the last step there is nothing to wake: the task completes.
    """

    def __init__(self, duration: timedelta | float, output: Any = None) -> None:
        self.duration = as_timedelta(duration)
        self.output = output

    def __repr__(self) -> str:
        return f"Sleep({self.duration!r}, output={self.output!r})"


class Child:
    """Complete this step with the result of a new task that runs `steps` (a sub-agent).

    No worker slot is held while the child runs; the child's record names this step as
    its `parent`. If the child fails or is cancelled, this step fails (`ChildFailed`,
    `ChildCancelled`); cancelling this task cancels the child.
    """

    def __init__(
        self,
        steps: Sequence[StepSpec | dict[str, Any] | str],
        *,
        task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.steps = [to_step(step) for step in steps]
        self.task_id = task_id
        self.metadata = dict(metadata or {})


class NeedsInput(msgspec.Struct, frozen=True, kw_only=True):
    """Pause the task until someone answers `prompt`; the answer becomes this step's output.

    `timeout` (seconds or a timedelta): unanswered that long, the task fails with
    `InputExpired` (an approval that expires), by a timer that needs no worker; or, given
    a `default`, goes on with it as the answer.
    """

    prompt: str
    schema: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout: timedelta | float | None = None
    default: Any | msgspec.UnsetType = msgspec.UNSET

    def request(self, now: datetime) -> InputRequest:
        expires = None if self.timeout is None else now + as_timedelta(self.timeout)
        return InputRequest(
            prompt=self.prompt, schema=self.schema, expires_at=expires, default=self.default
        )


def woken(sleep: Sleep) -> NeedsInput:
    """A branch's Sleep: its child task waits until then, and the timer that ends the
    wait answers with the sleep's output (an answer sent earlier wakes it early)."""
    wake = utcnow() + sleep.duration
    return NeedsInput(
        prompt=f"sleeping until {wake:%Y-%m-%d %H:%M:%S} UTC (an answer wakes it now)",
        timeout=sleep.duration,
        default=sleep.output,
    )


def stored(result: Any, deep: bool = False) -> Any:
    """`result` with its Pydantic models as plain JSON values (a step's output is stored as
    JSON, which msgspec cannot write a model as), inside a `Sleep` or `NextSteps` too.
    `deep`: the tool's return type holds models, wherever they are nested."""
    if isinstance(result, Sleep):
        return Sleep(result.duration, output=stored(result.output, deep))
    if isinstance(result, NextSteps):
        return msgspec.structs.replace(result, output=stored(result.output, deep))
    if isinstance(result, Child | NeedsInput):
        return result
    return types.to_builtins(result) if deep or _holds_models(result) else result


def _holds_models(value: Any) -> bool:
    """A model, or a list, tuple or dict with one among its items (deeper ones are found
    when the return type says so: `deep`)."""
    if isinstance(value, list | tuple):
        return any(types.is_model(item) for item in value)
    if isinstance(value, dict):
        return any(types.is_model(item) for item in value.values())
    return types.is_model(value)
