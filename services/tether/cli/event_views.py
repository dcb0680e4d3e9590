"""Following a task: its events as JSON lines, as readable lines, or as lines over a live
progress bar on a terminal, with the streamed text between them."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn
from rich.text import Text

from tether.cli.output import STATUS_STYLES, format_error, format_time, print_json, stdout
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
from tether.schemas.tasks import Heartbeat, TaskRecord, TaskStatus, TokenChunk

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
