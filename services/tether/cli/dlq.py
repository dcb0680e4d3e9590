"""`tether dlq`: the dead letters, and re-running the task of one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tether.cli import render
from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    JsonOption,
    NatsOption,
    PrefixOption,
    fail,
)
from tether.cli.running import (
    ExitCode,
    TaskIdArgument,
    checked_id,
    connected,
    run,
)

if TYPE_CHECKING:
    from tether.client import Client
    from tether.schemas.records import TaskStatus
    from tether.schemas.work import DeadLetter


async def _dlq_ls(nats: str, prefix: str, limit: int, as_json: bool) -> ExitCode:
    from tether.schemas.codec import to_builtins

    async with connected(nats, prefix) as client:
        letters = await client.dead_letters(limit)
        now = await _task_statuses(client, letters)
    if as_json:
        render.print_json(
            [
                {**to_builtins(letter), "task_status": now.get(letter.task_id or "")}
                for letter in letters
            ]
        )
    else:
        render.print_table(render.dead_letters_table(letters, now))
    return ExitCode.OK


async def _task_statuses(client: Client, letters: list[DeadLetter]) -> dict[str, TaskStatus]:
    """Each dead letter's task as it is now: a retried task may have completed since."""
    statuses = {}
    for task_id in {letter.task_id for letter in letters if letter.task_id}:
        record = await client.find(task_id)
        if record is not None:
            statuses[task_id] = record.status
    return statuses


def dlq_ls(
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="The latest this many.")
    ] = 20,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """List the latest dead letters: steps Tether gave up on, oldest first."""
    run(_dlq_ls(nats, prefix, limit, as_json), as_json)


async def _dlq_retry(nats: str, prefix: str, task_id: str, wait: bool, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        await client.retry(task_id)
        record = await client.get(task_id)
        if as_json:
            render.print_json(record)
        else:
            render.print_lines([f"retrying task {task_id} from step {record.current_step}"])
        if not wait:
            return ExitCode.OK
        from tether.cli.following import follow

        return await follow(client, task_id, render.event_view(as_json))


def dlq_retry(
    task_id: TaskIdArgument,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the task to its end.")] = False,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Run a failed task again from its failed step (completed steps are not re-run)."""
    run(_dlq_retry(nats, prefix, checked_id(task_id), wait, as_json), as_json)


async def _dlq_show(nats: str, prefix: str, task_id: str, limit: int, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        letters = [
            letter for letter in await client.dead_letters(limit) if letter.task_id == task_id
        ]
    if not letters:
        fail(f"no dead letter of task {task_id!r} among the latest {limit}: see 'tether dlq ls'")
    if as_json:
        render.print_json(letters)
    else:
        for letter in letters:
            render.print_table(render.dead_letter_table(letter))
    return ExitCode.OK


def dlq_show(
    task_id: TaskIdArgument,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="Look among the latest N.")
    ] = 1000,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Show a task's dead letters whole: the error, its traceback, the message."""
    run(_dlq_show(nats, prefix, checked_id(task_id), limit, as_json), as_json)


def register(app: typer.Typer) -> None:
    dlq = typer.Typer(help="Dead letters: steps Tether gave up on.", no_args_is_help=True)
    dlq.command("ls")(dlq_ls)
    dlq.command("show")(dlq_show)
    dlq.command("retry")(dlq_retry)
    app.add_typer(dlq, name="dlq")
