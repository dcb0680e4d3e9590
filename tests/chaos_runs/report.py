"""Plain-text tables and the lines of a run's log."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence

from tests.chaos_runs.executions import Execution
from tether import TaskRecord

_START = time.monotonic()


def say(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since the run started."""
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(h) for h in headers], *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(_is_number(row[i]) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        padded = (
            cell.rjust(w) if numeric[i] else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def verdict(failures: Sequence[str]) -> str:
    if not failures:
        return "PASS"
    return "FAIL\n" + "\n".join(f"  - {failure}" for failure in failures)


def lost_table(
    records: Mapping[str, TaskRecord | None],
    lost: Iterable[str],
    ran: Sequence[Execution],
    started: float,
    limit: int = 10,
) -> str:
    """Where each of the first `limit` lost tasks stands: its record (status, step, error,
    last change) and the steps that ran, with times in seconds since `started`."""
    rows: list[list[object]] = []
    for task_id in list(lost)[:limit]:
        steps = sorted(f"{e.step}@{e.started - started:.1f}" for e in ran if e.task_id == task_id)
        record = records.get(task_id)
        if record is None:
            rows.append([task_id, "no record", None, None, None, " ".join(steps)])
            continue
        at = round(record.updated_at.timestamp() - started, 1)
        error = f"{record.error.type}: {record.error.message}"[:70] if record.error else None
        rows.append([task_id, record.status.value, record.current_step, at, error, " ".join(steps)])
    headers = ["task", "status", "current_step", "updated (s)", "error", "steps run (@ s)"]
    return table(headers, rows)
