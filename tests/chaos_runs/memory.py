"""Resident memory of a run's long-lived processes, sampled from /proc."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.chaos_runs.processes import rss_mb

WARM = 60.0
"""Seconds a process runs before its memory counts as warmed up (imports, caches, the
first connections): growth is measured from the first sample after this."""
GROWTH_MB = 20.0
GROWTH_SHARE = 0.25
"""A process whose memory grew past both bounds from its warm sample to the end is not
flat."""


@dataclass(frozen=True)
class Growth:
    label: str
    start: float
    warm: float
    end: float
    peak: float
    lived: float
    """Seconds between the first and the last sample."""

    @property
    def grew(self) -> float:
        return self.end - self.warm

    @property
    def flat(self) -> bool:
        return self.grew <= max(GROWTH_MB, GROWTH_SHARE * self.warm)


@dataclass
class Memory:
    """RSS samples (MB) per process label, as (seconds since its first sample, MB)."""

    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    _first: dict[str, float] = field(default_factory=dict)

    def sample(self, pids: dict[str, int]) -> None:
        now = time.monotonic()
        for label, pid in pids.items():
            mb = rss_mb(pid)
            if mb is not None:
                first = self._first.setdefault(label, now)
                self.samples.setdefault(label, []).append((now - first, mb))

    async def every(self, interval: float, pids: Callable[[], dict[str, int]]) -> None:
        """Sample `pids()` now and every `interval` seconds until cancelled."""
        while True:
            self.sample(pids())
            await asyncio.sleep(interval)

    def growth(self, label: str) -> Growth:
        series = self.samples[label]
        warm = next((mb for at, mb in series if at >= WARM), series[-1][1])
        return Growth(
            label=label,
            start=series[0][1],
            warm=warm,
            end=series[-1][1],
            peak=max(mb for _, mb in series),
            lived=series[-1][0],
        )

    def series(self, label: str) -> str:
        """The samples of one process, MB, as `12.3 14.0 ...`."""
        return " ".join(f"{mb:.0f}" for _, mb in self.samples[label])
