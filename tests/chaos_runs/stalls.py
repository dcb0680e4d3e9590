"""How long completions stopped around a kill: pure functions over completion times."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

SETTLE = 10.0
"""Seconds after a restarted node is healthy still counted as part of its kill."""


@dataclass(frozen=True)
class Kill:
    """One SIGKILL of a node and its restart (wall-clock seconds)."""

    node: str
    role: str
    """What the node was when it was killed: "leader" or "follower" of the work stream."""
    killed_at: float
    restarted_at: float
    healthy_at: float


@dataclass(frozen=True)
class Stall:
    kill: Kill
    longest_gap: float
    """The longest time between two task completions from just before the kill until
    SETTLE seconds after the node was healthy again."""
    first_after: float | None
    """From the kill to the first completion after it (None: nothing completed after)."""
    completed: int
    """Tasks completed within that window."""


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest time without a completion within [start, end], counting the gap that
    spans `start` whole (from the last completion before it) and the one past `end` only
    up to `end`; `times` sorted."""
    lo = max(bisect.bisect_right(times, start) - 1, 0)
    inside = list(times[lo : bisect.bisect_right(times, end)])
    if not inside:
        return end - start
    gaps = [b - a for a, b in itertools.pairwise(inside)]
    gaps += [inside[0] - start, end - inside[-1]]
    return max(gaps)


def stall(times: Sequence[float], kill: Kill, until: float | None = None) -> Stall:
    """The stall around `kill`: the window runs until `until` (the next kill) or SETTLE
    seconds after the node was healthy, whichever comes first."""
    end = kill.healthy_at + SETTLE if until is None else min(until, kill.healthy_at + SETTLE)
    end = min(end, times[-1]) if times else end
    after = bisect.bisect_right(times, kill.killed_at)
    first = times[after] - kill.killed_at if after < len(times) else None
    completed = bisect.bisect_right(times, end) - after
    return Stall(kill, longest_gap(times, kill.killed_at, end), first, completed)


def stalls(times: Sequence[float], kills: Sequence[Kill]) -> list[Stall]:
    """The stall around each kill (in the order they happened)."""
    ordered = sorted(times)
    ends: list[float | None] = [*(k.killed_at for k in kills[1:]), None]
    return [stall(ordered, kill, end) for kill, end in zip(kills, ends, strict=True)]


def baseline(times: Sequence[float], before: float, skip: int = 10) -> float:
    """The longest gap between completions before `before` (the first kill), past the
    first `skip` ones (the start): what a gap is without a kill."""
    ordered = [t for t in sorted(times) if t < before][skip:]
    return max((b - a for a, b in itertools.pairwise(ordered)), default=0.0)
