"""`tether message` and `tether update-agent`: steer a running agent task."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
from tether.cli.running import ExitCode, TaskIdArgument, checked_id, connected, run

if TYPE_CHECKING:
    from tether.client import Client


async def _steer(
    nats: str,
    prefix: str,
    task_id: str,
    act: Callable[[Client], Awaitable[None]],
    said: tuple[str, str],
    as_json: bool,
) -> ExitCode:
    """Tell the task something with `act`, then say so: a line, or `{"task_id", <key>:
    true}` (`said` is both)."""
    async with connected(nats, prefix) as client:
        await act(client)
    line, key = said
    if as_json:
        render.print_json({"task_id": task_id, key: True})
    else:
        render.print_lines([line])
    return ExitCode.OK


def message(
    task_id: TaskIdArgument,
    words: Annotated[list[str], typer.Argument(metavar="TEXT...", help="What to tell it.")],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Tell a running agent task something: it reads it before its next LLM call, once."""
    task_id, text = checked_id(task_id), " ".join(words)
    said = f"told task {task_id}; its agent reads it before its next call"

    def act(client: Client) -> Awaitable[None]:
        return client.send_message(task_id, text)

    run(_steer(nats, prefix, task_id, act, (said, "sent"), as_json), as_json)


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
    task_id = checked_id(task_id)
    said = f"updated task {task_id}'s agent from its next call"

    def act(client: Client) -> Awaitable[None]:
        return client.update_agent(
            task_id, model=model, instructions=instructions, token_budget=budget
        )

    run(_steer(nats, prefix, task_id, act, (said, "updated"), as_json), as_json)


def register(app: typer.Typer) -> None:
    app.command()(message)
    app.command("update-agent")(update_agent)
