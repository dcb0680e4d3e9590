"""The Tether step that runs a Pydantic AI agent now: what its units, its waits and its
model calls reach (a context variable the tool function sets around the run)."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic_ai.tools import DeferredToolRequests

    from tether.integrations.journal import Journal
    from tether.integrations.meter import Meter
    from tether.tools.context import StepContext


@dataclass
class Running:
    """The Tether step that runs a Pydantic AI agent now (`current()` inside its run)."""

    ctx: StepContext
    journal: Journal
    meter: Meter
    pending: list[DeferredToolRequests] = field(default_factory=list)
    """Calls waiting for a person, as `TetherApprovals` saw them (the prompt's text)."""


_running: ContextVar[Running | None] = ContextVar("tether_pydantic_ai_run", default=None)


def current() -> Running:
    """The running Tether step; only called inside one (`in_durable_context`)."""
    running = _running.get()
    if running is None:
        raise RuntimeError("no Tether step is running this Pydantic AI agent")
    return running


def enter(running: Running) -> Callable[[], None]:
    """Make `running` current; returns the function that leaves it."""
    token = _running.set(running)
    return lambda: _running.reset(token)


def step_context() -> StepContext:
    """The Tether step running the agent, for a tool that reports progress or streams
    (`step_context().progress(message=...)`); raises outside one."""
    running = _running.get()
    if running is None:
        raise RuntimeError(
            "step_context() is for the tools of a Pydantic AI agent that a Tether worker "
            "runs (app.add(agent)); outside one there is no step to report to"
        )
    return running.ctx


def running_now() -> Running | None:
    """The running step, or None outside one (the agent then runs as without Tether)."""
    return _running.get()
