"""Following a task: its events as JSON lines, as readable lines, or as lines over a live
progress bar on a terminal, with the streamed text between them."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any, Protocol

from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn
from rich.text import Text

from tether.cli.asking import waiting_line
from tether.cli.output import (
    STATUS_STYLES,
    format_error,
    format_time,
    is_terminal,
    print_answer,
    print_json,
    stdout,
)
from tether.cli.transcript import Output, Piece, Shown
from tether.clock import utcnow
from tether.schemas.codec import encode
from tether.schemas.events import (
    TERMINAL_EVENTS,
    AgentUpdated,
    AnyStatusEvent,
    MessageSent,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
    Waiting,
)
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.work import TokenChunk
from tether.schemas.workers import Heartbeat

MAX_LANES = 8
"""Branches past this share the last lane's indent, so wide groups stay on screen."""


def event_line(event: AnyStatusEvent, said: str | None = None) -> Text:
    """`12:00:01  step_started  step 0 search  attempt 1`, plus what the event says; a
    branch of a parallel step shows as `step 1[2]`, indented by its lane. A retry whose
    error is the one its step's last retry `said` is counted, not said again."""
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
    if event.build is not None:
        line.append(f"  on {event.build}", style="dim")
    line.append(_detail(event, said))
    line.rstrip()
    return line


def note_line(message: str) -> Text:
    """`12:00:03  ... waiting for a worker serving 'search' ...`: not an event, a remark."""
    return Text(f"{format_time(utcnow())}  ... {message}", style="yellow")


def _detail(event: AnyStatusEvent, said: str | None = None) -> Text:
    if isinstance(event, StepRetrying) and event.error is not None and event.retry_in_ms:
        wait = f"  (attempt {(event.attempt or 0) + 1} in {event.retry_in_ms / 1000:.1f}s)"
        error = format_error(event.error)
        return Text(f"  {'the same error' if error == said else error}{wait}", style="red")
    if event.error is not None:
        return Text(f"  {format_error(event.error)}", style="red")
    if isinstance(event, StepRetrying) and event.retry_in_ms:
        return Text(f"  retry in {event.retry_in_ms / 1000:.1f}s")
    if isinstance(event, StepCompleted) and event.skipped:
        return Text("  (from checkpoint)")
    if isinstance(event, StepCompleted) and event.notes:
        return Text("".join(f"\n  note: {said}" for said in event.notes), style="yellow")
    if isinstance(event, Submitted) and event.note:
        return Text(f"  {event.note}", style="yellow")
    if isinstance(event, MessageSent):
        return Text(f"  {event.text!r}", style="cyan")
    if isinstance(event, AgentUpdated):
        changed = {"model": event.model, "token_budget": event.token_budget}
        told = [f"{name} {value}" for name, value in changed.items() if value is not None]
        told += ["new instructions"] if event.instructions is not None else []
        return Text("  " + ", ".join(told), style="cyan")
    return Text()


class EventView(Protocol):
    """Where `watch` sends what it learns, in the order of a `Transcript` (events, and the
    streamed text between them), and heartbeats when polled."""

    @property
    def shows_progress(self) -> bool: ...
    def show(self, outputs: list[Output]) -> None: ...
    def heartbeat(self, heartbeat: Heartbeat | None) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self, record: TaskRecord) -> None: ...
    def __enter__(self) -> EventView: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class JsonLines:
    """One JSON status event per line (the completed event carries the result); a step's
    streamed text is one line of its own, `{"event": "text", ...}`, before the event that
    ended it."""

    shows_progress = False

    def __init__(self) -> None:
        self._task_id = ""
        self._texts: dict[tuple[int, int | None], list[str]] = {}

    def show(self, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._task_id = out.event.task_id
                print_json(out.event)
            elif isinstance(out, Piece):
                self._texts.setdefault((out.step, out.branch), []).append(out.text)
            else:
                text = "".join(self._texts.pop((out.step, out.branch), []))
                line = {"event": "text", "task_id": self._task_id, "step": out.step}
                if out.branch is not None:
                    line["branch"] = out.branch
                print_json({**line, "attempt": out.attempt, "text": text, "cut_off": out.cut_off})

    def heartbeat(self, heartbeat: Heartbeat | None) -> None:
        pass

    def note(self, message: str) -> None:
        """What the task waits for: said to a person, so not part of the JSON lines."""

    def finish(self, record: TaskRecord) -> None:
        pass

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


CUT_OFF = " [cut off: the attempt did not finish]"


class PlainLines(JsonLines):
    """One readable line per event, each step's text under the line that started it, then
    the result: for logs and pipes."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.console = console or stdout()
        self._mid_line = False
        self._failure_shown = False
        self._said: dict[tuple[int | None, int | None], str] = {}
        """The error each step's last retry said (see `event_line`)."""

    def show(self, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._end_line()
                self.event_line(out.event)
                self._failure_shown |= out.event.kind == "failed"
                self._asked(out.event)
            elif isinstance(out, Piece):
                self.console.print(Text(out.text), end="", soft_wrap=True)
                self._mid_line = True
            else:
                if out.cut_off:
                    note = CUT_OFF if self._mid_line else CUT_OFF.lstrip()
                    self.console.print(Text(note, style="yellow"), end="")
                    self._mid_line = True
                self._end_line()

    def event_line(self, event: AnyStatusEvent) -> None:
        self.console.print(self._line(event))

    def _line(self, event: AnyStatusEvent) -> Text:
        """The event's line; a retry's error is said once a step, then counted."""
        where = (event.step, event.branch)
        line = event_line(event, self._said.get(where))
        if isinstance(event, StepRetrying) and event.error is not None:
            self._said[where] = format_error(event.error)
        return line

    def note(self, message: str) -> None:
        self._end_line()
        self.console.print(note_line(message))

    def _asked(self, event: AnyStatusEvent) -> None:
        """A task that now waits for a person: say so, the question, how to answer."""
        said = waiting_line(event) if isinstance(event, Waiting) else None
        if said is not None:
            self.note(said)

    def _end_line(self) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False

    def finish(self, record: TaskRecord) -> None:
        self._end_line()
        if record.status is TaskStatus.COMPLETED:
            self.console.print_json(encode(record.result).decode())
        elif record.status is TaskStatus.FAILED and record.error and not self._failure_shown:
            # Its `failed` event did not come (yet): the record says why all the same.
            error = record.error
            self.console.print(Text(f"failed: {error.type}: {error.message}", style="red"))


class StreamedText:
    """Where a step's text stands: a later attempt of a step starts its text over (the
    demo's narration)."""

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


class _ProgressWithText(Progress):
    """The progress bar, under the line of text that is still being written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.tail = ""  # first: the constructor renders once
        super().__init__(*args, **kwargs)

    def get_renderables(self) -> Iterable[RenderableType]:
        if self.tail:
            yield Text(self.tail)
        yield from super().get_renderables()


class LiveView(PlainLines):
    """Event lines and streamed text scrolling above a progress bar of the running step
    (a terminal only). Text is printed for good a whole line at a time; the line being
    written shows just above the bar, so nothing printed is ever erased."""

    shows_progress = True

    def __init__(self, console: Console | None = None) -> None:
        super().__init__(console)
        self._progress = _ProgressWithText(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            console=self.console,
            transient=True,
        )
        self._bar = self._progress.add_task("", total=None, visible=False)
        self._running: int | None = None
        self._streamed: list[str] = []
        """Every piece of text shown: an answer streamed is not printed again."""

    def show(self, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._end_text()
                self._progress.console.print(self._line(out.event))
                self._track(out.event)
                self._failure_shown |= out.event.kind == "failed"
                self._asked(out.event)
            elif isinstance(out, Piece):
                self._write(out.text)
            else:
                self._end_text(out.cut_off)
        self._progress.refresh()

    def note(self, message: str) -> None:
        self._end_text()
        self._progress.console.print(note_line(message))
        self._progress.refresh()

    def _track(self, event: AnyStatusEvent) -> None:
        if isinstance(event, StepStarted):
            self._running = event.step
        elif isinstance(event, (StepCompleted, StepRetrying, Waiting, *TERMINAL_EVENTS)):
            self._running = None
            self._progress.update(self._bar, visible=False)

    def _write(self, text: str) -> None:
        """Add text to the line being written; print every line that is whole (ended, or
        as wide as the terminal) above the bar, for good."""
        self._streamed.append(text)
        tail = self._progress.tail + text
        width = max(20, self.console.width)
        while "\n" in tail or len(tail) > width:
            cut = tail.find("\n")
            if cut < 0 or cut > width:  # wrap at the last space that fits
                cut = tail.rfind(" ", 0, width + 1)
                cut = cut if cut > 0 else width
            self._progress.console.print(Text(tail[:cut]))
            tail = tail[cut + 1 :] if tail[cut : cut + 1] in ("\n", " ") else tail[cut:]
        self._progress.tail = tail

    def _end_text(self, cut_off: bool = False) -> None:
        """Print the line being written for good (with a note if its attempt was cut off)."""
        tail, self._progress.tail = self._progress.tail, ""
        if tail or cut_off:
            line = Text(tail)
            if cut_off:
                line.append(CUT_OFF, style="yellow")
            self._progress.console.print(line)

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

    def finish(self, record: TaskRecord) -> None:
        """As `PlainLines`, but a person reads the result: a string answer that streamed
        already is not shown again, any other once as text (see `print_answer`), never
        as a JSON string."""
        self._end_text()
        if record.status is not TaskStatus.COMPLETED:
            super().finish(record)
        elif not streamed(record.result, "".join(self._streamed)):
            print_answer(record.result, self.console)

    def __enter__(self) -> LiveView:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()


def streamed(result: object, text: str) -> bool:
    """Whether a string result is text already shown (spacing aside: the terminal wraps)."""
    return isinstance(result, str) and " ".join(result.split()) in " ".join(text.split())


def event_view(as_json: bool) -> EventView:
    """JSON lines with `--json`; piped, plain lines then the result as JSON; on a terminal,
    lines over a progress bar and the answer once, as text."""
    if as_json:
        return JsonLines()
    return LiveView() if is_terminal() else PlainLines()
