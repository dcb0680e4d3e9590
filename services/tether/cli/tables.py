"""The Rich tables of `tether ls`, `tether status` and `tether dlq ls`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text

from tether.agents.errors import frames
from tether.cli.output import (
    error_origin,
    format_error,
    format_time,
    format_usage,
    status_text,
)
from tether.schemas.codec import encode
from tether.schemas.events import AnyStatusEvent
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.work import DeadLetter
from tether.schemas.workers import Heartbeat
from tether.tasks.plans import current_tool
from tether.tasks.stalls import NO_DISPATCHER, Stall


def step_position(record: TaskRecord) -> str:
    """`current_step/steps`, as the record has them: steps count from 0, as in events
    and dead letters, so `0/3` is the first of three and `3/3` a finished plan."""
    return f"{record.current_step}/{record.plan_length}"


def tasks_table(records: Iterable[TaskRecord]) -> Table:
    table = Table(box=None, header_style="bold")
    table.add_column("task", overflow="fold")
    for name in ("status", "step", "tool", "updated"):
        table.add_column(name)
    for record in records:
        table.add_row(
            record.task_id,
            status_text(record.status),
            step_position(record),
            current_tool(record),
            format_time(record.updated_at),
        )
    return table


def dead_letters_table(
    letters: Iterable[DeadLetter], now: Mapping[str, TaskStatus] | None = None
) -> Table:
    """`now`: each letter's task status today, so a task retried since shows as such."""
    table = Table(
        "time",
        "tool",
        "task",
        "step",
        "attempt",
        "task now",
        "error",
        "where",
        box=None,
        header_style="bold",
    )
    for letter in letters:
        status = (now or {}).get(letter.task_id or "")
        table.add_row(
            format_time(letter.time),
            letter.tool,
            letter.task_id or "-",
            "-" if letter.step is None else str(letter.step),
            str(letter.attempt),
            "-" if status is None else status_text(status),
            Text(format_error(letter.error), style="red"),
            error_origin(letter.error),
        )
    return table


def dead_letter_table(letter: DeadLetter) -> Table:
    """`dlq show`: one dead letter, its traceback whole."""
    rows: list[tuple[str, str | Text]] = [
        ("time", format_time(letter.time)),
        ("tool", letter.tool),
        ("task", letter.task_id or "-"),
        ("step", "-" if letter.step is None else str(letter.step)),
        ("attempt", str(letter.attempt)),
        ("error", Text(format_error(letter.error), style="red")),
    ]
    if letter.error.traceback:
        rows.append(("traceback", Text(letter.error.traceback)))
    rows += [("subject", letter.subject), ("message", f"{letter.size or len(letter.data):,} bytes")]
    return _grid(rows)


def _grid(rows: list[tuple[str, str | Text]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


def queued_table(stall: Stall) -> Table:
    """The `status` of a task no dispatcher has recorded yet."""
    return _grid([("status", Text("submitted", style="yellow")), ("waiting", stall.message)])


def _run_rows(record: TaskRecord) -> list[tuple[str, str | Text]]:
    """What the task spent, and which build started it."""
    rows: list[tuple[str, str | Text]] = []
    if record.usage is not None:
        rows.append(("usage", format_usage(record.usage)))
    if record.build is not None:
        rows.append(("build", f"started on {record.build}"))
    return rows


def record_table(
    record: TaskRecord,
    heartbeat: Heartbeat | None,
    last: AnyStatusEvent | None,
    stall: Stall | None = None,
    dispatcher_running: bool = True,
    question: str | None = None,
    verbose: bool = False,
) -> Table:
    """The `status` view: one field per row; an agent task's `question` and, once it
    completed, its answer (a string as text); the error's traceback, unless it is one of
    Tether's own that explains itself (then only when `verbose`)."""
    rows: list[tuple[str, str | Text]] = [
        ("task", record.task_id),
        ("status", status_text(record.status)),
    ]
    rows += _asked_rows(record, question)
    rows.append(
        ("step", f"{step_position(record)} {current_tool(record)}{_attempt(heartbeat, last)}")
    )
    if heartbeat is not None:
        rows.append(("heartbeat", _progress(heartbeat)))
    if stall is not None:
        label = "retrying" if stall.kind == "retry" else "waiting"
        rows.append((label, Text(stall.message, style="yellow")))
    elif record.note is not None and record.status is TaskStatus.PENDING:
        rows.append(("note", Text(record.note, style="yellow")))
    rows += [("note", Text(said, style="yellow")) for said in record.notes]
    if not dispatcher_running and not record.status.is_terminal:
        rows.append(("warning", Text(NO_DISPATCHER, style="yellow")))
    if record.input_request is not None and record.status is TaskStatus.WAITING:
        rows.append(("waiting for", record.input_request.prompt))
        if record.input_request.schema:
            rows.append(("answer with", encode(record.input_request.schema).decode()))
    if record.error is not None:
        rows.append(("error", Text(format_error(record.error), style="red")))
        if shown := frames(record.error, verbose):
            rows.append(("traceback", Text(shown, style="dim")))
    rows += _run_rows(record)
    rows += _family_rows(record)
    rows += [
        ("created", format_time(record.created_at)),
        ("updated", format_time(record.updated_at)),
    ]
    if record.deadline_at is not None:
        rows.append(("deadline", format_time(record.deadline_at)))
    if record.metadata:
        rows.append(("metadata", encode(record.metadata).decode()))
    return _grid(rows)


def _family_rows(record: TaskRecord) -> list[tuple[str, str | Text]]:
    """Sleep, the parent step and the children: where the task sits in the tree."""
    rows: list[tuple[str, str | Text]] = []
    if record.wake_at is not None and not record.status.is_terminal:
        rows.append(("sleeping until", format_time(record.wake_at)))
    if record.parent is not None:
        rows.append(("parent", f"{record.parent.task_id} (step {record.parent.step})"))
    for child in record.children:
        marker = "  <- step " + str(record.current_step) if child == record.awaiting else ""
        rows.append(("child", child + marker))
    return rows


def _attempt(heartbeat: Heartbeat | None, last: AnyStatusEvent | None) -> str:
    attempt = heartbeat.attempt if heartbeat is not None else last.attempt if last else None
    return "" if attempt is None else f" (attempt {attempt})"


def _progress(heartbeat: Heartbeat) -> str:
    done = "" if heartbeat.progress is None else f"{heartbeat.progress:.0%} "
    age = (datetime.now(UTC) - heartbeat.time).total_seconds()
    note = f"{heartbeat.message} " if heartbeat.message else ""
    return f"{done}{note}(worker {heartbeat.worker_id}, {age:.1f}s ago)"


def _asked_rows(record: TaskRecord, question: str | None) -> list[tuple[str, str | Text]]:
    """The question (an agent task's) and, once the task completed, its answer."""
    rows: list[tuple[str, str | Text]] = []
    if question is not None:
        rows.append(("question", Text(question)))
    if record.status is TaskStatus.COMPLETED:
        answer = record.result
        rows.append(("answer", Text(answer if isinstance(answer, str) else _json(answer))))
    return rows


def _json(value: object) -> str:
    return encode(value).decode()
