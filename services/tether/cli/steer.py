"""`tether message` and `tether update-agent`: steer a running agent task."""

from __future__ import annotations

from typing import Annotated

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


async def _message(nats: str, prefix: str, task_id: str, text: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        await client.send_message(task_id, text)
    if as_json:
        render.print_json({"task_id": task_id, "sent": True})
    else:
        render.print_lines([f"told task {task_id}; its agent reads it before its next call"])
    return ExitCode.OK


def message(
    task_id: TaskIdArgument,
    words: Annotated[list[str], typer.Argument(metavar="TEXT...", help="What to tell it.")],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Tell a running agent task something: it reads it before its next LLM call, once."""
    run(_message(nats, prefix, checked_id(task_id), " ".join(words), as_json), as_json)


async def _update(
    nats: str,
    prefix: str,
    task_id: str,
    model: str | None,
    instructions: str | None,
    budget: int | None,
    as_json: bool,
) -> ExitCode:
    async with connected(nats, prefix) as client:
        await client.update_agent(
            task_id, model=model, instructions=instructions, token_budget=budget
        )
    if as_json:
        render.print_json({"task_id": task_id, "updated": True})
    else:
        render.print_lines([f"updated task {task_id}'s agent from its next call"])
    return ExitCode.OK


def update_agent(
    task_id: TaskIdArgument,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME", help="Another model, same endpoint.")
    ] = None,
    instructions: Annotated[
        str | None, typer.Option("--instructions", metavar="TEXT", help="New instructions.")
    ] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", min=1, metavar="TOKENS", help="A new token budget.")
    ] = None,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Change a running agent task's model, instructions or token budget from its next call."""
    if model is None and instructions is None and budget is None:
        fail("nothing to change: give --model, --instructions or --budget")
    run(_update(nats, prefix, checked_id(task_id), model, instructions, budget, as_json), as_json)


def register(app: typer.Typer) -> None:
    app.command()(message)
    app.command("update-agent")(update_agent)
