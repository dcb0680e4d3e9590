"""`tether fork`: run a task again from one of its steps, as a new task."""

from __future__ import annotations

import json
from typing import Annotated, Any

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
from tether.cli.running import ExitCode, TaskIdArgument, checked_id, connected, run


async def _fork(
    nats: str,
    prefix: str,
    task_id: str,
    from_step: int,
    new_input: Any,
    new_id: str | None,
    wait: bool,
    as_json: bool,
) -> ExitCode:
    async with connected(nats, prefix) as client:
        handle = await client.fork(task_id, from_step, input=new_input, new_task_id=new_id)
        record = await handle.get()
        if as_json:
            render.print_json(record)
        else:
            render.print_lines(
                [f"{handle.task_id}  (a fork of {task_id}, running from step {from_step})"]
            )
        if not wait:
            return ExitCode.OK
        from tether.cli.following import follow

        return await follow(client, handle.task_id, render.event_view(as_json))


def fork(
    task_id: TaskIdArgument,
    from_step: Annotated[
        int, typer.Option("--from-step", min=0, metavar="N", help="The step to run again.")
    ],
    new_input: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON", help="A new input for that step (JSON)."),
    ] = None,
    new_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="The new task's id.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the new task to its end.")] = False,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Run task ID again from --from-step as a new task; the steps before it do not run."""
    data = None
    if new_input is not None:
        try:
            data = json.loads(new_input)
        except json.JSONDecodeError as exc:
            fail(f"--input is not JSON: {exc}")
    new = None if new_id is None else checked_id(new_id)
    run(_fork(nats, prefix, checked_id(task_id), from_step, data, new, wait, as_json), as_json)


def register(app: typer.Typer) -> None:
    app.command()(fork)
