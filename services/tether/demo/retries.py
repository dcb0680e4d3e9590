"""What the demo says when a step fails and runs again (pure): the step's own error, the
attempt that comes next and when, or the worker that died under it."""

from __future__ import annotations

from rich.markup import escape

from tether.cli.output import format_error
from tether.schemas.events import StepRetrying
from tether.schemas.records import ErrorInfo


def retry_line(event: StepRetrying, max_attempts: int | None) -> str:
    """`could not connect to URL: ... (attempt 2 of 8, next in 4 s)`, as rich markup."""
    reason = event.error.message if event.error is not None else "it failed"
    of = f" of {max_attempts}" if max_attempts else ""
    wait = f", next in {event.retry_in_ms / 1000:.0f} s" if event.retry_in_ms else ""
    return f"{escape(reason)} [dim](attempt {(event.attempt or 0) + 1}{of}{wait})[/]"


def again(retried: bool, killed: bool) -> str:
    """Why a step starts a second time: its failure was already told; else its worker died
    (the demo killed it, or it stopped by itself)."""
    if retried:
        return ""
    if killed:
        return " [yellow](again: it was running when the worker died)[/]"
    return " [yellow](again: its previous attempt never finished: its worker stopped)[/]"


def failure_line(error: ErrorInfo | None) -> str:
    """`ModelOutputTruncated: ...`, once, without the traceback (`tether status` has it)."""
    return escape(format_error(error)) if error is not None else "no error was recorded"
