"""How the operator commands look: Rich tables, event lines, a live progress bar, JSON."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from tether.schemas.codec import encode
from tether.schemas.events import (
    TERMINAL_EVENTS,
    AnyStatusEvent,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
    Waiting,
)
from tether.schemas.tasks import (
    DeadLetter,
    ErrorInfo,
    Heartbeat,
    TaskRecord,
    TaskStatus,
    TokenChunk,
    Usage,
)
from tether.tasks.plans import current_tool

STATUS_STYLES = {
    TaskStatus.PENDING: "dim",
    TaskStatus.RUNNING: "cyan",
    TaskStatus.WAITING: "yellow",
    TaskStatus.COMPLETED: "green",
    TaskStatus.FAILED: "red",
    TaskStatus.CANCELLED: "magenta",
}


PIPE_WIDTH = 1000
"""Columns of output that is not a terminal: whole ids and errors, never 80-column wraps."""


def stdout() -> Console:
    console = Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:
        console.width = PIPE_WIDTH
    return console


def print_json(value: Any) -> None:
    """One compact JSON document on its own line, for scripts (msgspec encodes Structs)."""
    sys.stdout.buffer.write(encode(value) + b"\n")
    sys.stdout.flush()


def print_pretty_json(value: Any) -> None:
    stdout().print_json(encode(value).decode())


def status_text(status: TaskStatus) -> Text:
    return Text(status.value, style=STATUS_STYLES[status])


def format_time(moment: datetime | None) -> str:
    """UTC; the date only when it is not today, so tables stay narrow."""
    if moment is None:
        return "-"
    moment = moment.astimezone(UTC)
    if moment.date() == datetime.now(UTC).date():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_error(error: ErrorInfo | None) -> str:
    return "-" if error is None else f"{error.type}: {error.message}"


def step_position(record: TaskRecord) -> str:
    """`current_step/steps`, as the record has them: steps count from 0, as in events
    and dead letters, so `0/3` is the first of three and `3/3` a finished plan."""
    return f"{record.current_step}/{record.plan_length}"


# -- tables -------------------------------------------------------------------


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
        )
    return table


def record_table(
    record: TaskRecord, heartbeat: Heartbeat | None, last: AnyStatusEvent | None
) -> Table:
    """The `status` view: one field per row."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("task", record.task_id),
        ("status", status_text(record.status)),
        ("step", f"{step_position(record)} {current_tool(record)}{_attempt(heartbeat, last)}"),
    ]
    if heartbeat is not None:
        rows.append(("heartbeat", _progress(heartbeat)))
    if record.note is not None and record.status is TaskStatus.PENDING:
        rows.append(("note", Text(record.note, style="yellow")))
    if record.input_request is not None and record.status is TaskStatus.WAITING:
        rows.append(("waiting for", record.input_request.prompt))
        if record.input_request.schema:
            rows.append(("answer with", encode(record.input_request.schema).decode()))
    if record.error is not None:
        rows.append(("error", Text(format_error(record.error), style="red")))
    if record.usage is not None:
        rows.append(("usage", format_usage(record.usage)))
    rows += _family_rows(record)
    rows += [
        ("created", format_time(record.created_at)),
        ("updated", format_time(record.updated_at)),
    ]
    if record.deadline_at is not None:
        rows.append(("deadline", format_time(record.deadline_at)))
    if record.metadata:
        rows.append(("metadata", encode(record.metadata).decode()))
    for name, value in rows:
        table.add_row(name, value)
    return table


def format_usage(usage: Usage) -> str:
    """`1,234 in (200 cached) + 56 out = 1,290 tokens, 3 LLM calls`."""
    cached = f" ({usage.cached_tokens:,} cached)" if usage.cached_tokens else ""
    calls = f", {usage.requests} LLM call{'s' if usage.requests != 1 else ''}"
    return (
        f"{usage.input_tokens:,} in{cached} + {usage.output_tokens:,} out"
        f" = {usage.total_tokens:,} tokens{calls}"
    )


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


# -- following a task -----------------------------------------------------------


MAX_LANES = 8
"""Branches past this share the last lane's indent, so wide groups stay on screen."""


def event_line(event: AnyStatusEvent) -> Text:
    """`12:00:01  step_started  step 0 search  attempt 1`, plus what the event says; a
    branch of a parallel step shows as `step 1[2]`, indented by its lane."""
    tag = str(type(event).__struct_config__.tag)
    line = Text(f"{format_time(event.time)}  ")
    line.append(f"{tag:<15}", style=STATUS_STYLES[event.status])
    if event.step is not None and event.branch is not None:
        line.append(
            " " + "  " * min(event.branch, MAX_LANES) + f"step {event.step}[{event.branch}]"
        )
    elif event.step is not None:
        line.append(f" step {event.step}")
    if event.tool:
        line.append(f" {event.tool}")
    if event.attempt is not None:
        line.append(f"  attempt {event.attempt}")
    line.append(_detail(event))
    line.rstrip()
    return line


def _detail(event: AnyStatusEvent) -> Text:
    if event.error is not None:
        return Text(f"  {format_error(event.error)}", style="red")
    if isinstance(event, StepRetrying) and event.retry_in_ms:
        return Text(f"  retry in {event.retry_in_ms / 1000:.1f}s")
    if isinstance(event, StepCompleted) and event.skipped:
        return Text("  (from checkpoint)")
    if isinstance(event, Submitted) and event.note:
        return Text(f"  {event.note}", style="yellow")
    if isinstance(event, Waiting) and event.input_request is not None:
        return Text(
            f"  {event.input_request.prompt}  (answer: tether input {event.task_id} JSON)",
            style="yellow",
        )
    return Text()


class EventView(Protocol):
    """Where `watch` sends what it learns: events as they happen, heartbeats when polled."""

    @property
    def shows_progress(self) -> bool: ...
    def event(self, event: AnyStatusEvent) -> None: ...
    def token(self, chunk: TokenChunk) -> None: ...
    def heartbeat(self, heartbeat: Heartbeat | None) -> None: ...
    def finish(self, record: TaskRecord) -> None: ...
    def __enter__(self) -> EventView: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class JsonLines:
    """One JSON status event per line; the completed event carries the result."""

    shows_progress = False

    def event(self, event: AnyStatusEvent) -> None:
        print_json(event)

    def token(self, chunk: TokenChunk) -> None:
        pass  # events only: `handle.stream()` or the tokens subject give the chunks

    def heartbeat(self, heartbeat: Heartbeat | None) -> None:
        pass

    def finish(self, record: TaskRecord) -> None:
        pass

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


class PlainLines(JsonLines):
    """One readable line per event, then the result: for logs and pipes."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or stdout()
        self._text = StreamedText()

    def event(self, event: AnyStatusEvent) -> None:
        self._end_text()
        self.console.print(event_line(event))

    def token(self, chunk: TokenChunk) -> None:
        """Streamed text as it comes, on its own lines between the events."""
        for piece, style in self._text.add(chunk):
            self.console.print(Text(piece, style=style), end="", soft_wrap=True)
        if chunk.done:
            self._end_text()

    def _end_text(self) -> None:
        if self._text.open_line:
            self.console.print()
            self._text.open_line = False

    def finish(self, record: TaskRecord) -> None:
        self._end_text()
        if record.status is TaskStatus.COMPLETED:
            self.console.print_json(encode(record.result).decode())


class StreamedText:
    """Where a step's text stands: a later attempt of a step starts its text over."""

    def __init__(self) -> None:
        self._attempts: dict[tuple[int, int | None], int] = {}
        self.open_line = False

    def add(self, chunk: TokenChunk) -> list[tuple[str, str]]:
        """The pieces to print for `chunk`, each with a style."""
        key = (chunk.step, chunk.branch)
        seen = self._attempts.get(key, chunk.attempt)
        if chunk.attempt < seen:
            return []  # a late chunk of an attempt already replaced
        pieces: list[tuple[str, str]] = []
        if chunk.attempt > seen:
            gap = "\n" if self.open_line else ""
            note = f"[attempt {seen} of step {chunk.step} was cut off; attempt {chunk.attempt}:]"
            pieces.append((f"{gap}{note}\n", "yellow"))
            self.open_line = False
        self._attempts[key] = chunk.attempt
        if chunk.delta:
            pieces.append((chunk.delta, ""))
            self.open_line = True
        return pieces


class LiveView(PlainLines):
    """Event lines scrolling above a progress bar of the running step (a terminal only)."""

    shows_progress = True

    def __init__(self, console: Console | None = None) -> None:
        super().__init__(console)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            console=self.console,
            transient=True,
        )
        self._bar = self._progress.add_task("", total=None, visible=False)
        self._running: int | None = None

    def event(self, event: AnyStatusEvent) -> None:
        self._end_text()
        if isinstance(event, StepStarted):
            self._running = event.step
        elif isinstance(event, (StepCompleted, StepRetrying, Waiting, *TERMINAL_EVENTS)):
            self._running = None
            self._progress.update(self._bar, visible=False)
        self._progress.console.print(event_line(event))

    def heartbeat(self, heartbeat: Heartbeat | None) -> None:
        # A heartbeat outlives its step for the bucket's TTL: show only the running step's.
        if heartbeat is None or heartbeat.step != self._running:
            self._progress.update(self._bar, visible=False)
            return
        label = f"step {heartbeat.step} {heartbeat.tool}"
        if heartbeat.message:
            label += f": {heartbeat.message}"
        known = heartbeat.progress is not None
        self._progress.update(
            self._bar,
            description=label,
            total=1.0 if known else None,
            completed=heartbeat.progress or 0.0,
            visible=True,
        )

    def __enter__(self) -> LiveView:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()


def event_view(as_json: bool) -> EventView:
    if as_json:
        return JsonLines()
    console = stdout()
    return LiveView(console) if console.is_terminal else PlainLines(console)


def print_table(table: Table) -> None:
    stdout().print(table)


def print_lines(lines: Sequence[str]) -> None:
    console = stdout()
    for line in lines:
        console.print(Text(line))
