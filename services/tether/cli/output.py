"""How a command writes: the console, JSON for scripts, and the text of a status, a time,
an error and token usage, shared by the tables and the event views."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tether.agents.calls import cut_off_tokens
from tether.schemas.codec import encode
from tether.schemas.records import ErrorInfo, TaskStatus, Usage

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


def is_terminal() -> bool:
    """Whether stdout is a terminal a person reads (rich's rule: a tty, or
    `TTY_COMPATIBLE=1` / `FORCE_COLOR` set): the one place the CLI decides between what
    a person reads and what a script parses."""
    return stdout().is_terminal


def warn(message: str) -> None:
    """A line on stderr a person should read, which does not fail the command."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text(f"warning: {message}", style="yellow")
    )


def print_json(value: Any) -> None:
    """One compact JSON document on its own line, for scripts (msgspec encodes Structs)."""
    sys.stdout.buffer.write(encode(value) + b"\n")
    sys.stdout.flush()


def print_pretty_json(value: Any) -> None:
    stdout().print_json(encode(value).decode())


def print_answer(value: Any, console: Console | None = None) -> None:
    """An answer for a person: a string as it is (its lines, not a JSON string with `\\n`
    escapes), anything else as indented JSON."""
    console = console or stdout()
    if isinstance(value, str):
        console.print(Text(value))
    else:
        console.print_json(encode(value).decode())


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


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def error_origin(error: ErrorInfo | None) -> str:
    """The innermost frame of the error's traceback: `tools.py:42 in search` ("-" when it
    has none)."""
    frames = _FRAME.findall(error.traceback or "") if error is not None else []
    if not frames:
        return "-"
    path, line, function = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {function}"


def format_usage(usage: Usage) -> str:
    """`1,234 in (200 cached) + 56 out = 1,290 tokens, 3 LLM calls (1 cut off: tokens
    unknown), $0.0012`; a cost no price tells is `cost unknown`, never `$0.0000`; tokens
    counted from a cut-off call's stream are marked `~` and said so."""
    cached = f" ({usage.cached_tokens:,} cached)" if usage.cached_tokens else ""
    calls = f", {usage.requests} LLM call{'s' if usage.requests != 1 else ''}"
    if usage.unfinished:
        calls += f" ({usage.unfinished} cut off: {cut_off_tokens(usage)})"
    if usage.cost_usd is None:
        cost = ", cost unknown (no price for the model)" if usage.total_tokens else ""
    else:
        cost = f", ${usage.cost_usd:.4f}" if usage.cost_usd else ""
    about = "~" if usage.streamed_tokens else ""
    return (
        f"{usage.input_tokens:,} in{cached} + {about}{usage.output_tokens:,} out"
        f" = {about}{usage.total_tokens:,} tokens{calls}{cost}"
    )


def print_table(table: Table) -> None:
    stdout().print(table)


def print_lines(lines: Sequence[str]) -> None:
    console = stdout()
    for line in lines:
        console.print(Text(line))
