"""Why a task is not moving, said for a person: the one account `tether status`,
`tether watch`, the dashboard and the MCP gateway's status message give."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Literal

import msgspec

from tether.schemas.events import StepRetrying
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.workers import Heartbeat, WorkerBeat

StallKind = Literal["worker", "retry", "dispatcher", "holder"]

DEAD_AFTER = timedelta(seconds=2)
"""Silence after which a running step's worker is said to be gone: the default of
`Liveness.dead_after` (a reader cannot know a fleet's own setting)."""
UNBEATING_AFTER = timedelta(seconds=30)
"""Silence of a step's own heartbeat after which its worker is said to be gone when the
worker has no beat in the workers bucket (one that does not beat, or dead for so long
that its beat is no longer listed)."""


class Stall(msgspec.Struct, frozen=True, kw_only=True):
    """What a task waits for: a worker serving its tool, the next attempt of a step, a
    dispatcher to record its submission, or the running step's silent worker to be
    replaced."""

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


def silent_holder(
    record: TaskRecord,
    heartbeat: Heartbeat | None,
    beats: Collection[WorkerBeat],
    now: datetime,
) -> Stall | None:
    """A running step whose worker fell silent (killed, cut off): how long, and whether
    a live worker serving its tool can run it again. `beats` are the listed workers'
    beats (claimed ones left out: a survivor is already handing that worker's steps on).
    None while the worker beats, or when the task is not running that step."""
    if record.status is not TaskStatus.RUNNING or record.awaiting is not None:
        return None
    if heartbeat is None or heartbeat.step != record.current_step:
        return None
    holder = next((b for b in beats if b.worker_id == heartbeat.worker_id), None)
    if holder is None:
        last, limit = heartbeat.time, UNBEATING_AFTER
    else:
        last, limit = max(holder.time, heartbeat.time), DEAD_AFTER
    if now - last <= limit:
        return None
    others = [
        b
        for b in beats
        if b.worker_id != heartbeat.worker_id
        and heartbeat.tool in b.tools
        and now - b.time <= DEAD_AFTER
    ]
    return holder_wait(heartbeat, (now - last).total_seconds(), len(others), last)


def holder_wait(heartbeat: Heartbeat, silent_s: float, serving: int, since: datetime) -> Stall:
    step = f"step {heartbeat.step}"
    step += "" if heartbeat.branch is None else f" branch {heartbeat.branch}"
    gone = f"worker {heartbeat.worker_id} has been silent {silent_s:.1f} s"
    tool = repr(heartbeat.tool)
    if serving:
        then = f"{step} runs again on another worker serving {tool} ({serving} running)"
    else:
        then = (
            f"{step} runs again when a worker serving {tool} starts — none is running; "
            f"{START_WORKER}"
        )
    return Stall(kind="holder", message=f"{gone}; {then}", since=since)
