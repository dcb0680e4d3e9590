"""Message schedules (nats-server 2.12+): a message stored now, delivered at a time.

Tether's durable sleep and its timers are schedules on the work stream: the server
keeps them like any message, so they survive restarts, and fires each onto its target
subject (which must be a subject of the same stream).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether.nats.headers import SCHEDULE, SCHEDULE_TARGET


def schedule_time(at: datetime) -> str:
    """RFC 3339 in whole seconds, rounded up: a timer may fire late, never early."""
    whole = at.astimezone(UTC).replace(microsecond=0)
    if whole < at:
        whole += timedelta(seconds=1)
    return whole.strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_headers(at: datetime, target: str) -> dict[str, str]:
    """The headers that make a publish a one-shot schedule onto `target` at `at`."""
    return {SCHEDULE: f"@at {schedule_time(at)}", SCHEDULE_TARGET: target}
