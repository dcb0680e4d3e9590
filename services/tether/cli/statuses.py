"""The exit code `tether status` gives (pure): the outcome, as every command's is."""

from __future__ import annotations

from tether.cli.running import ExitCode, outcome
from tether.schemas.records import TaskRecord


def told(record: TaskRecord) -> ExitCode:
    """`status`'s exit code: the outcome of a task that ended (1 failed, 3 cancelled), 0
    while it has not, so a script can branch on `tether status ID` alone."""
    return outcome(record) if record.status.is_terminal else ExitCode.OK
