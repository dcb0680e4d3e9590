"""Durations as the Python API takes them: a `timedelta`, or a number of seconds."""

from __future__ import annotations

from datetime import timedelta

Duration = timedelta | float
"""A `timedelta`, or seconds (int or float), as in httpx's timeouts."""


def as_timedelta(value: Duration) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def as_seconds(value: Duration) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def human(value: Duration) -> str:
    """`7 d`, `3 h 5 min`, `45 s`: the two largest units, for a person to read (a
    `timedelta`'s own text is `7 days, 0:00:00`)."""
    left = round(as_seconds(value))
    parts: list[str] = []
    for unit, size in _UNITS:
        count, left = divmod(left, size)
        if count and len(parts) < 2:
            parts.append(f"{count} {unit}")
        elif parts:
            break  # `1 d 5 min` would skip the hours: say `1 d` instead
    return " ".join(parts) or "0 s"
