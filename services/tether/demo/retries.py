"""What the demo says when a step fails and runs again (pure): the step's own error, the
attempt that comes next and when, or the worker that died under it."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from tether.cli.output import format_error
from tether.schemas.events import StepRetrying
from tether.schemas.records import ErrorInfo, TaskRecord
from tether.worker.decisions import MENDED


def retry_line(event: StepRetrying, max_attempts: int | None, before: str | None = None) -> str:
    """`could not connect to URL: ... (attempt 2 of 8, next in 4 s)`, as rich markup; the
    error said `before` (by the step's last retry) is not said again, only counted."""
    reason = event.error.message if event.error is not None else "it failed"
    of = f" of {max_attempts}" if max_attempts else ""
    wait = f", next in {event.retry_in_ms / 1000:.0f} s" if event.retry_in_ms else ""
    said = "the same again" if reason == before else escape(reason)
    return f"{said} [dim](attempt {(event.attempt or 0) + 1}{of}{wait})[/]"


def again(retried: bool, killed: bool) -> str:
    """Why a step starts a second time: its failure was already told; else its worker died
    (the demo killed it, or it stopped by itself)."""
    if retried:
        return ""
    if killed:
        return " [yellow](again: it was running when the worker died)[/]"
    return " [yellow](again: its previous attempt never finished: its worker stopped)[/]"


def failure_line(error: ErrorInfo | None) -> str:
    """`ModelOutputTruncated: ...`, once, without the traceback (saved, see `save_failure`);
    how to retry a task on the demo's server, which ends with it, becomes running the demo
    again."""
    return "no error was recorded" if error is None else escape(_told(error))


def _told(error: ErrorInfo) -> str:
    """`Type: message`, its way to retry the task (on a server gone with the demo) said
    as running the demo again."""
    said, mended, _ = format_error(error).partition(MENDED)
    return said + ("; once that is mended, run the demo again" if mended else "")


def failed_line(record: TaskRecord, told: bool, saved: Path) -> str:
    """The demo's last words on a failed task: its error, unless it was told as it
    happened, and where it is kept whole. Its embedded server is gone by then, so they
    point at a file, never at a command that asks it (`tether status`)."""
    said = "the task failed (above)" if told else failure_line(record.error)
    return f"{said}; its error and traceback are saved in {escape(str(saved))}"


def save_failure(path: Path, record: TaskRecord) -> Path:
    """The failed task's error whole, traceback included, beside the demo's answers."""
    error = record.error
    what = "no error was recorded" if error is None else _told(error)
    frames = f"\n\n```\n{error.traceback}\n```" if error is not None and error.traceback else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Task `{record.task_id}` failed\n\n{what}{frames}\n")
    return path.resolve()
