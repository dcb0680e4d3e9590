"""The one clock of the package: aware UTC datetimes, as every wire message carries."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
