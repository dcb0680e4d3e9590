"""Listing tasks from the status index: pure, no I/O.

The index has one row per task, `<prefix>.index.<status>.<created µs>.<task_id>`, kept
as the record's status changes (see `Records.index`). A row is a hint: the record stays
the truth, so a row left behind by a crash is skipped when read, never shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from tether.schemas.records import TaskStatus


class Row(NamedTuple):
    created_us: int
    task_id: str
    status: str


def created_us(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


def parse(subjects: Iterable[str], prefix: str) -> list[Row]:
    """The rows among `subjects` (`<prefix>.index.<status>.<µs>.<id>`), oldest first."""
    start = f"{prefix}.index."
    rows = []
    for subject in subjects:
        status, _, rest = subject[len(start) :].partition(".")
        stamp, _, task_id = rest.partition(".")
        if subject.startswith(start) and stamp.isdigit() and task_id:
            rows.append(Row(int(stamp), task_id, status))
    return sorted(rows)


def after(rows: list[Row], cursor: tuple[int, str], reverse: bool = False) -> list[Row]:
    """The rows after the task at `cursor` (its creation µs, its id), in the order of
    `rows` (`reverse`: newest first)."""
    if reverse:
        return [row for row in rows if (row.created_us, row.task_id) < cursor]
    return [row for row in rows if (row.created_us, row.task_id) > cursor]


def counts(statuses: Iterable[str]) -> dict[str, int]:
    """How many tasks have each status, every status present (zero when none)."""
    found = {status.value: 0 for status in TaskStatus}
    for status in statuses:
        if status in found:
            found[status] += 1
    return found
