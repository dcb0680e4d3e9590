"""A step's attempts as a reader takes them in: a run of attempts that failed the same
way is one line with a count, not a stack of identical errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.schemas.records import ErrorInfo
from tether.ui.views import Attempt, plural

FAILED = ("retrying", "failed")
"""Outcomes of an attempt that ended in an error (retried, or the last one)."""


@dataclass(frozen=True)
class Fold:
    """Consecutive attempts with the same ending: one attempt, or a run of attempts that
    failed with the same error (or all crashed)."""

    attempts: tuple[Attempt, ...]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

    @property
    def count(self) -> int:
        return len(self.attempts)

    @property
    def outcome(self) -> str:
        return self.last.outcome

    @property
    def error(self) -> ErrorInfo | None:
        return self.last.error

    @property
    def head(self) -> str:
        """`attempts 1–3 failed 3 times`, or for one attempt its number and outcome."""
        first = self.attempts[0]
        if self.count == 1:
            return f"attempt {first.number}: {first.outcome}"
        verb = "crashed" if first.outcome == "crashed" else "failed"
        return f"attempts {first.number}–{self.last.number} {verb} {plural(self.count, 'time')}"


def folded(attempts: Sequence[Attempt]) -> list[Fold]:
    """`attempts` in order, each run of attempts that ended the same way folded into one."""
    folds: list[list[Attempt]] = []
    for attempt in attempts:
        if folds and _same_ending(folds[-1][-1], attempt):
            folds[-1].append(attempt)
        else:
            folds.append([attempt])
    return [Fold(tuple(run)) for run in folds]


def _same_ending(before: Attempt, attempt: Attempt) -> bool:
    if before.outcome == attempt.outcome == "crashed":
        return True
    if before.outcome not in FAILED or attempt.outcome not in FAILED:
        return False
    return _said(before.error) == _said(attempt.error)


def _said(error: ErrorInfo | None) -> tuple[str, str] | None:
    """What a reader compares: the type and message (tracebacks differ by line)."""
    return None if error is None else (error.type, error.message)
