"""How every operator command runs: exit codes, one-line (or JSON) errors, the client.

Light to import (the client, NATS and the wire schemas load when a command runs), so
`tether --help` costs what typer does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Coroutine
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.cli.common import (
    fail,
    nats_config,
)
from tether.errors import (
    TaskCancelledError,
    TaskExistsError,
    TaskFailedError,
    TaskNotFoundError,
    TetherError,
)

if TYPE_CHECKING:
    from tether.client import Client
    from tether.schemas.records import TaskRecord


class ExitCode(IntEnum):
    """What every `tether` command's exit status means; scripts switch on these."""

    OK = 0
    """The task completed, or the command did what it was asked."""
    FAILED = 1
    ERROR = 2
    """A usage error, an invalid input, NATS unreachable, or a state that forbids the action."""
    CANCELLED = 3
    NOT_FOUND = 4
    INTERRUPTED = 130
    """Ctrl-C: the task itself keeps running."""


OUTCOMES = {
    "completed": ExitCode.OK,
    "failed": ExitCode.FAILED,
    "cancelled": ExitCode.CANCELLED,
}
"""The exit code of a task that ended, by its status."""
TaskIdArgument = Annotated[str, typer.Argument(metavar="ID", help="The task id.")]


# -- running a command ------------------------------------------------------------


REPORTED: tuple[type[BaseException], ...] = (TetherError,)
"""What a command reports as one line; anything else is a bug, with its traceback."""


def run(command: Coroutine[Any, Any, int], as_json: bool = False) -> None:
    """Run a command's coroutine and exit with its code; errors become one stderr line,
    or with `--json` the API's error reply on stdout (`{"error": {"code", "message"}}`)."""
    try:
        code = asyncio.run(command)
    except KeyboardInterrupt:
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except BrokenPipeError:
        # The reader of our output left (`tether watch ID | head`): not an error to report,
        # and Python's final flush of stdout must not fail loudly either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(ExitCode.OK) from None
    except REPORTED as exc:
        message, code = describe(exc)
        if as_json:
            import msgspec

            from tether.schemas.api import error_reply

            reply = error_reply(exc)
            error = msgspec.structs.replace(reply.error, message=" ".join(message.split()))
            typer.echo(msgspec.json.encode(msgspec.structs.replace(reply, error=error)))
            raise typer.Exit(code) from None
        fail(" ".join(message.split()), code)
    raise typer.Exit(code)


def describe(exc: BaseException) -> tuple[str, ExitCode]:
    """The message and exit code of an error a command let through."""
    if isinstance(exc, TaskNotFoundError):
        return str(exc), ExitCode.NOT_FOUND
    if isinstance(exc, TaskFailedError):
        return str(exc), ExitCode.FAILED
    if isinstance(exc, TaskCancelledError):
        return str(exc), ExitCode.CANCELLED
    if isinstance(exc, TaskExistsError) and exc.free_at is None:
        return (
            f"task {exc.task_id!r} already exists: follow it with 'tether watch {exc.task_id}' "
            "or submit with another --id",
            ExitCode.ERROR,
        )
    return str(exc), ExitCode.ERROR


@contextlib.asynccontextmanager
async def connected(nats: str, prefix: str) -> AsyncIterator[Client]:
    """A client of the installation under `prefix`, which must exist: a typo in --prefix
    says so instead of creating an empty installation."""
    from tether.client import Client

    async with Client(nats_config(nats, prefix), provision=False) as client:
        yield client


def checked_id(task_id: str) -> str:
    """The id if it can name a task; ids are parts of subjects and keys."""
    from tether.schemas.ids import InvalidNameError, validate_task_id

    try:
        return validate_task_id(task_id)
    except InvalidNameError as exc:
        fail(str(exc))


def outcome(record: TaskRecord) -> ExitCode:
    """Exit code of a task that has ended (ERROR if it has not)."""
    return OUTCOMES.get(record.status.value, ExitCode.ERROR)
