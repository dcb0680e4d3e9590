"""Why a task is not moving, said for a person: the one account `tether status`,
`tether watch`, the dashboard and the MCP gateway's status message give."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Literal

import msgspec

from tether.schemas.events import StepRetrying
from tether.schemas.records import TaskRecord, TaskStatus

StallKind = Literal["worker", "retry", "dispatcher"]


class Stall(msgspec.Struct, frozen=True, kw_only=True):
    """What a task waits for: a worker serving its tool, the next attempt of a step, or
    a dispatcher to record its submission."""

    kind: StallKind
    message: str
    since: datetime | None = None
    until: datetime | None = None
    """When the wait is due to end (a retry), if anyone knows."""


START_WORKER = "start one with 'tether worker MODULE:APP'"
START_DISPATCHER = "start one with 'tether dispatcher' (or 'tether dev')"


NO_DISPATCHER = (
    "no dispatcher is running: raw submissions, sleeps, deadlines and input timeouts "
    f"wait until one starts; {START_DISPATCHER}"
)


def clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S UTC")


def unserved(record: TaskRecord, live: Collection[str]) -> list[str]:
    """The tools of the task's next step that no live worker serves, by name (none when
    the task is not waiting for a worker: it runs, sleeps, waits for a person or a child,
    or is over)."""
    if record.status not in (TaskStatus.PENDING, TaskStatus.RUNNING):
        return []
    if record.awaiting is not None or not record.has_step(record.current_step):
        return []
    spec = record.spec(record.current_step)
    if spec.parallel is None:
        tools = [spec.tool]
    else:
        done = set(record.done_branches)
        tools = [branch.tool for j, branch in enumerate(spec.parallel) if j not in done]
    return sorted({tool for tool in tools if tool is not None and tool not in live})


def worker_wait(record: TaskRecord, missing: list[str]) -> Stall:
    names = ", ".join(repr(tool) for tool in missing)
    since = record.updated_at
    message = (
        f"waiting for a worker serving {names} since {clock(since)}: "
        f"none is running; {START_WORKER}"
    )
    return Stall(kind="worker", message=message, since=since)


def retry_wait(event: StepRetrying, now: datetime) -> Stall:
    """The last attempt's error, and when the next one is due."""
    due = event.time + timedelta(milliseconds=event.retry_in_ms or 0)
    left = (due - now).total_seconds()
    when = f"in {left:.0f}s" if left > 0 else "now"
    error = event.error
    failed = f"attempt {event.attempt} failed"
    failed += "" if error is None else f": {error.type}: {error.message}"
    message = f"{failed}; the next is due at {clock(due)} ({when})"
    return Stall(kind="retry", message=message, since=event.time, until=due)


def dispatcher_wait(task_id: str, queued_at: datetime, running: bool) -> Stall:
    """A submission still in the submit stream: no dispatcher has recorded it yet."""
    message = (
        f"task {task_id!r} was submitted at {clock(queued_at)} and waits for a dispatcher "
        "to record it"
    )
    message += "" if running else f": no dispatcher is running; {START_DISPATCHER}"
    return Stall(kind="dispatcher", message=message, since=queued_at)
