"""`tether submit`, `status`, `result`, `watch`, `cancel`, `input`, `ls`: one task, or many."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    JsonOption,
    NatsOption,
    PrefixOption,
    fail,
)
from tether.cli.running import TaskIdArgument, checked_id, run

Status = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]
"""`TaskStatus`'s values, here so `--help` need not load the wire schemas (a unit test
keeps them equal)."""

# -- submit -------------------------------------------------------------------------


def submit(
    steps: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TOOL[=JSON]...",
            help="Steps in order; JSON is the step's input (else the previous output). "
            "With --agent: the question.",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", metavar="NAME", help="Ask agent NAME (the arguments are the question)."
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option("--budget", min=1, metavar="TOKENS", help="The agent's token budget."),
    ] = None,
    follow_up: Annotated[
        str | None,
        typer.Option(
            "--continue",
            metavar="ID",
            help="Ask a follow-up of the finished agent task ID (its conversation comes "
            "first; the agent is its own unless --agent names another).",
        ),
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            "-f",
            metavar="FILE",
            help="A task as JSON ({steps, task_id, metadata, ...}); - reads stdin.",
        ),
    ] = None,
    task_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Task id (default: generated).")
    ] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", metavar="KEY=VALUE", help="Metadata; repeatable.")
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option("--deadline", metavar="SECONDS", help="Fail the task after this long."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the task to its end, like watch.")
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            help="Fail at once when no worker serves a tool (--no-strict: keep the task, "
            "pending, until one does)."
        ),
    ] = True,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Submit a task (or a question to an agent) and print its id."""
    if follow_up is not None and (file is not None or not steps):
        fail(f"--continue asks a follow-up: write e.g. tether submit --continue {follow_up} 'Why?'")
    from tether.cli import submitting

    asking = agent if follow_up is None else agent or ""  # "": the earlier task's agent
    request = submitting.build_request(
        steps or [], file, task_id, meta or [], deadline, asking, budget, strict
    )
    run(submitting.submit(nats, prefix, request, wait, as_json, follow_up), as_json)


# -- one task -------------------------------------------------------------------------


def status(
    task_id: TaskIdArgument,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also the traceback of an error that explains itself."
        ),
    ] = False,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Show a task: status, question, answer, step, attempt, progress, error, times;
    exit 1 if it failed, 3 if cancelled."""
    from tether.cli import task_calls

    run(task_calls.status(nats, prefix, checked_id(task_id), as_json, verbose), as_json)


def result(
    task_id: TaskIdArgument,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the task to end.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="SECONDS", help="Give up waiting after this long."),
    ] = None,
    text: Annotated[
        bool,
        typer.Option(
            "--text",
            help="Print a string result as it is (its lines); anything else as indented JSON.",
        ),
    ] = False,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Print a completed task's result as JSON (--text: a string as text); exit 1 if it
    failed, 3 if cancelled."""
    from tether.cli import task_calls

    if text and as_json:
        fail("--text and --json ask for two different outputs: give one")
    how: task_calls.ResultFormat = "json" if as_json else "text" if text else "pretty"
    run(task_calls.result(nats, prefix, checked_id(task_id), wait, timeout, how), as_json)


def watch(
    task_id: TaskIdArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Follow a task's events (and the running step's progress) until it ends."""
    from tether.cli import task_calls

    run(task_calls.watch(nats, prefix, checked_id(task_id), as_json), as_json)


def cancel(
    task_id: TaskIdArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Cancel an unfinished task; a running step stops within one heartbeat."""
    from tether.cli import task_calls

    run(task_calls.cancel(nats, prefix, checked_id(task_id), as_json), as_json)


def answer(
    task_id: TaskIdArgument,
    data: Annotated[str, typer.Argument(metavar="JSON", help="The answer, as JSON.")],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Answer a task that is waiting for input."""
    from tether.cli import task_calls
    from tether.cli.submitting import parse_json

    answer = parse_json(data, "the answer")
    run(task_calls.send_input(nats, prefix, checked_id(task_id), answer, as_json), as_json)


# -- many tasks ---------------------------------------------------------------------------


def ls(
    status: Annotated[
        Status | None, typer.Option("--status", help="Only tasks with this status.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="At most this many.")
    ] = 50,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """List tasks, newest first."""
    from tether.cli import task_calls
    from tether.schemas.records import TaskStatus

    wanted = None if status is None else TaskStatus(status)
    run(task_calls.ls(nats, prefix, wanted, limit, as_json), as_json)


def register(app: typer.Typer) -> None:
    for command in (submit, status, result, watch, cancel, ls):
        app.command()(command)
    app.command("input")(answer)
