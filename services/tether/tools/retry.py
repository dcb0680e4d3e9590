"""Retry policy and the decision of what to do after a failed attempt (pure, no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import timedelta

from tether.durations import as_seconds, as_timedelta
from tether.schemas.plans import RetryOverride


@dataclass(frozen=True)
class RetryPolicy:
    """How a tool's failed steps are retried."""

    max_attempts: int = 3
    """Attempts in all, the first included; 1 means never retry."""
    initial_backoff: timedelta | float = timedelta(seconds=1)
    """Delay before the first retry (a timedelta, or seconds)."""
    max_backoff: timedelta | float = timedelta(seconds=60)
    """Cap on the delay between attempts."""
    backoff_coefficient: float = 2.0
    """Each retry waits this many times longer than the one before."""
    jitter: float = 0.2
    """Random spread of each delay, as a fraction of it (0.2 = ±20 %)."""
    poison_after: int = 2
    """Deaths of its worker while the step ran alone in it after which the step is given
    up as `SuspectedPoison`. A death beside other steps costs no attempt; a step that has
    died twice runs alone (see `tether.worker.runs`)."""

    def __post_init__(self) -> None:
        for name in ("initial_backoff", "max_backoff"):  # seconds are accepted too
            value = getattr(self, name)
            object.__setattr__(self, name, as_timedelta(value))
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.poison_after < 1:
            raise ValueError("RetryPolicy.poison_after must be at least 1")
        if self.backoff_coefficient < 1:
            raise ValueError("RetryPolicy.backoff_coefficient must be at least 1")

    def backoff(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """Delay after failed attempt number `attempt` (1-based)."""
        cap = as_seconds(self.max_backoff)
        exponent = min(attempt - 1, 64)
        try:
            capped = min(as_seconds(self.initial_backoff) * self.backoff_coefficient**exponent, cap)
        except OverflowError:  # a coefficient so large the float runs out: past the cap
            capped = cap
        spread = capped * self.jitter
        jittered = capped + (rng or random).uniform(-spread, spread)
        return timedelta(seconds=max(0.0, min(jittered, cap)))

    def can_retry(self, attempt: int) -> bool:
        return attempt < self.max_attempts

    def overridden(self, override: RetryOverride | None) -> RetryPolicy:
        if override is None:
            return self
        changes: dict[str, object] = {}
        if override.max_attempts is not None:
            changes["max_attempts"] = override.max_attempts
        if override.initial_backoff_ms is not None:
            changes["initial_backoff"] = timedelta(milliseconds=override.initial_backoff_ms)
        if override.max_backoff_ms is not None:
            changes["max_backoff"] = timedelta(milliseconds=override.max_backoff_ms)
        return replace(self, **changes)  # type: ignore[arg-type]
