"""Which steps ran, when, and which of them ran again after their checkpoint was stored.

A step's checkpoint is written after its tool returns, so every execution that counts
started before it. An execution that started after the checkpoint's `time` ran a step
whose output was already stored: the one thing Tether promises never happens. (The
last step of a completed task has no checkpoint: the record's `result`, written at
`updated_at`, stands in for it.) Executions of a step that crashed before checkpointing
are allowed and counted apart, as tests/chaos/ does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

StepKey = tuple[str, int, int | None]
"""(task, step, branch): what a checkpoint is stored under."""


@dataclass(frozen=True)
class Execution:
    task_id: str
    step: int
    branch: int | None
    attempt: int
    pid: int
    started: float
    """Wall-clock time (s) at which the tool started."""

    @property
    def key(self) -> StepKey:
        return (self.task_id, self.step, self.branch)


def parse(line: str) -> Execution:
    task_id, where, attempt, pid, started = line.split()
    step, _, branch = where.partition(".b")
    return Execution(
        task_id=task_id,
        step=int(step),
        branch=int(branch) if branch else None,
        attempt=int(attempt),
        pid=int(pid),
        started=float(started),
    )


def read(path: Path) -> list[Execution]:
    """Every execution in the file (a line cut short by a SIGKILL mid-write is skipped)."""
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(parse(line))
        except ValueError:
            continue
    return found


def checkpointed_reruns(
    executions: Iterable[Execution], stored_at: Mapping[StepKey, float]
) -> list[Execution]:
    """Executions that started after their step's checkpoint was stored."""
    return [e for e in executions if e.key in stored_at and e.started > stored_at[e.key]]


def repeats(executions: Iterable[Execution], planned: Mapping[StepKey, int]) -> Counter[StepKey]:
    """Runs beyond the planned ones (`planned[key]`, 1 when absent), per step: the steps
    a crash cut short and a redelivery ran again."""
    runs = Counter(e.key for e in executions)
    return Counter(
        {key: n - planned.get(key, 1) for key, n in runs.items() if n > planned.get(key, 1)}
    )
