"""Durations as the Python API takes them: a `timedelta`, or a number of seconds."""

from __future__ import annotations

from datetime import timedelta

Duration = timedelta | float
"""A `timedelta`, or seconds (int or float), as in httpx's timeouts."""


def as_timedelta(value: Duration) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def as_seconds(value: Duration) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
