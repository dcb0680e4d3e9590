"""Message schedules (nats-server 2.12+): a message stored now, delivered at a time.

Tether's durable sleeps, deadlines and input expiries are schedules in the timers stream.
A stream that allows schedules allows rollups whatever it asks for, and one
`Nats-Rollup: all` purges it, so only the dispatchers write there: any other role asks
for a timer on the work stream (`Names.schedule_subject`, which refuses rollups), and a
dispatcher turns the request into the schedule. The server keeps a schedule like any
message, so it survives restarts, and fires it onto `Names.fired_subject`, where a
dispatcher hands a woken step to its tool or fails a task whose timer ran out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tether.nats.headers import SCHEDULE, SCHEDULE_TARGET, TIMER, TIMER_AT, WAKE
from tether.schemas.names import Names

_TIMER_ID = re.compile(r"[A-Za-z0-9_=-]+(\.[A-Za-z0-9_=-]+)*")
_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def schedule_time(at: datetime) -> str:
    """RFC 3339 in whole seconds, rounded up: a timer may fire late, never early."""
    whole = at.astimezone(UTC).replace(microsecond=0)
    if whole < at:
        whole += timedelta(seconds=1)
    return whole.strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_headers(at: str, target: str) -> dict[str, str]:
    """The headers that make a publish a one-shot schedule onto `target` at `at`."""
    return {SCHEDULE: f"@at {at}", SCHEDULE_TARGET: target}


def request_headers(timer_id: str, at: datetime, wake: str | None) -> dict[str, str]:
    """The headers of a timer request (see the module's docstring)."""
    sent = {TIMER: timer_id, TIMER_AT: schedule_time(at)}
    if wake is not None:
        sent[WAKE] = wake
    return sent


@dataclass(frozen=True)
class TimerRequest:
    """A timer a role asked for, checked: its id, its time and what it wakes."""

    timer_id: str
    at: str
    wake: str | None


def read_request(names: Names, sent: dict[str, str]) -> TimerRequest | None:
    """The request these headers make, or None when they make none a dispatcher may
    schedule: an id that is not subject tokens, a time that is not RFC 3339 UTC, a
    wake onto anything but a tool's work subject."""
    timer_id, at, wake = sent.get(TIMER, ""), sent.get(TIMER_AT, ""), sent.get(WAKE)
    if not _TIMER_ID.fullmatch(timer_id) or not _AT.fullmatch(at):
        return None
    if wake is not None and not _is_tool_subject(names, wake):
        return None
    return TimerRequest(timer_id, at, wake)


def _is_tool_subject(names: Names, subject: str) -> bool:
    work = names.work_subject("")
    tokens = subject[len(work) :].split(".")
    return (
        subject.startswith(work)
        and 1 <= len(tokens) <= 2
        and all(_TIMER_ID.fullmatch(token) for token in tokens)
        and not tokens[0].startswith("_")
    )
