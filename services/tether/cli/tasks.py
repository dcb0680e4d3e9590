"""`tether submit`, `status`, `result`, `watch`, `cancel`, `input`, `ls`: one task, or many."""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from tether.agents.conversation import as_step
from tether.cli import render
from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    JsonOption,
    NatsOption,
    PrefixOption,
    fail,
)
from tether.cli.following import follow, live_heartbeat
from tether.cli.running import (
    ExitCode,
    TaskIdArgument,
    checked_id,
    connected,
    run,
)
from tether.client import Client
from tether.errors import (
    TaskCancelledError,
    TaskFailedError,
    TaskNotFoundError,
    UnservedToolWarning,
)
from tether.schemas.api import ListReply, SubmitReply, SubmitRequest
from tether.schemas.codec import to_builtins
from tether.schemas.tasks import StepSpec, TaskRecord, TaskStatus

# -- submit -------------------------------------------------------------------------


def parse_step(arg: str) -> StepSpec:
    """`TOOL` or `TOOL=JSON`; a tool name never contains '='."""
    tool, sep, raw = arg.partition("=")
    if not sep:
        return StepSpec(tool=tool)
    try:
        return StepSpec(tool=tool, input=msgspec.json.decode(raw))
    except msgspec.DecodeError as exc:
        fail(
            f"the input of step {arg!r} is not JSON ({exc}): "
            'quote the whole step, e.g. \'search={"query": "AI"}\''
        )


def parse_json(raw: str, what: str) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        fail(f"{what} is not JSON ({exc}): quote it, e.g. '{{\"approved\": true}}'")


def parse_meta(pairs: list[str]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--meta {pair!r} is not KEY=VALUE: write e.g. --meta user=alice")
        metadata[key] = value
    return metadata


def read_task_file(path: str) -> SubmitRequest:
    """A `TaskSubmit`-like document (the id may be left out); '-' reads stdin."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read the task file {path!r}: {exc.strerror or exc}")
    try:
        return msgspec.json.decode(data, type=SubmitRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        fail(
            f"the task file {path!r} is not a task ({exc}): "
            'write {"steps": [{"tool": "search", "input": {...}}, ...]}'
        )


def agent_step(agent: str, words: list[str], budget: int | None) -> StepSpec:
    """`tether submit --agent NAME QUESTION...`: the agent's first turn."""
    if not words:
        fail(f"no question: write e.g. tether submit --agent {agent} 'What changed in 2026?'")
    start: dict[str, Any] = {"input": " ".join(words)}
    if budget is not None:
        start["token_budget"] = budget
    return StepSpec(tool=agent, input=start)


def build_request(
    steps: list[str],
    file: str | None,
    task_id: str | None,
    meta: list[str],
    deadline: float | None,
    agent: str | None = None,
    budget: int | None = None,
    strict: bool = True,
) -> SubmitRequest:
    """The task to submit; options on the command line win over the file's fields."""
    if file is not None and (steps or agent):
        fail("give the steps either as arguments (or --agent) or with --file, not both")
    if file is None and not steps and agent is None:
        fail("no steps: name tools to run, e.g. 'tether submit search summarize', or use --file")
    if budget is not None and agent is None:
        fail("--budget is a token budget for an agent: use it with --agent NAME")
    if agent is not None:
        base = SubmitRequest(steps=[agent_step(agent, steps, budget)])
    elif file:
        base = read_task_file(file)
    else:
        base = SubmitRequest(steps=[parse_step(s) for s in steps])
    if deadline is not None and deadline <= 0:
        fail(f"--deadline {deadline} is not a positive number of seconds")
    return SubmitRequest(
        steps=base.steps,
        task_id=task_id or base.task_id,
        metadata={**base.metadata, **parse_meta(meta)},
        deadline_ms=int(deadline * 1000) if deadline is not None else base.deadline_ms,
        strict=strict,
    )


async def _submit(
    nats: str,
    prefix: str,
    request: SubmitRequest,
    wait: bool,
    as_json: bool,
    follow_up: str | None = None,
) -> ExitCode:
    async with connected(nats, prefix) as client:
        deadline = request.deadline_ms
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", UnservedToolWarning)
            if follow_up is not None:
                start = as_step(request.steps[0].input)
                handle = await client.continue_agent(
                    follow_up,
                    start.input or "",
                    agent=request.steps[0].tool or None,
                    token_budget=start.token_budget,
                    new_task_id=request.task_id,
                    metadata=request.metadata,
                    deadline=None if deadline is None else timedelta(milliseconds=deadline),
                )
            else:
                handle = await client.submit(
                    request.steps,
                    task_id=request.task_id,
                    metadata=request.metadata,
                    deadline=None if deadline is None else timedelta(milliseconds=deadline),
                    strict=request.strict,
                )
        for warning in said:
            render.warn(str(warning.message))
        if as_json:
            render.print_json(SubmitReply(task_id=handle.task_id))
        else:
            render.print_lines([handle.task_id])
        if not wait:
            return ExitCode.OK
        view = render.event_view(as_json)
        return await follow(client, handle.task_id, view, submitted=True)


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
    asking = agent if follow_up is None else agent or ""  # "": the earlier task's agent
    request = build_request(
        steps or [], file, task_id, meta or [], deadline, asking, budget, strict
    )
    run(_submit(nats, prefix, request, wait, as_json, follow_up), as_json)


# -- one task -------------------------------------------------------------------------


async def _status(nats: str, prefix: str, task_id: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        record = await client.find(task_id)
        if record is None:
            return await _queued_status(client, task_id, as_json)
        heartbeat = live_heartbeat(record, await client.heartbeat(task_id))
        last = await client.last_event(task_id)
        stall = await client.stall(record)
        dispatcher = record.status.is_terminal or await client.dispatcher_running()
    if as_json:
        view = to_builtins(record) | {
            "heartbeat": to_builtins(heartbeat),
            "last_event": to_builtins(last),
            "stall": to_builtins(stall),
            "dispatcher_running": dispatcher,
        }
        render.print_json(view)
    else:
        render.print_table(render.record_table(record, heartbeat, last, stall, dispatcher))
    return ExitCode.OK


async def _queued_status(client: Client, task_id: str, as_json: bool) -> ExitCode:
    """A task with no record: still in the submit stream, or unknown."""
    stall = await client.queued(task_id)
    if stall is None:
        raise TaskNotFoundError(task_id)
    if as_json:
        render.print_json({"task_id": task_id, "status": "submitted", "stall": stall})
    else:
        render.print_table(render.queued_table(stall))
    return ExitCode.OK


def status(
    task_id: TaskIdArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Show a task: status, step, attempt, progress, error, times."""
    run(_status(nats, prefix, checked_id(task_id), as_json), as_json)


def result_of(record: TaskRecord) -> Any:
    """The result of a completed task; the error that says why there is none otherwise."""
    if record.status is TaskStatus.FAILED:
        raise TaskFailedError(record.task_id, record.error)
    if record.status is TaskStatus.CANCELLED:
        raise TaskCancelledError(record.task_id)
    if record.status is not TaskStatus.COMPLETED:
        fail(
            f"task {record.task_id!r} is {record.status.value}, not completed: "
            f"wait for it with 'tether result {record.task_id} --wait'"
        )
    return record.result


async def _result(
    nats: str, prefix: str, task_id: str, wait: bool, timeout: float | None, as_json: bool
) -> ExitCode:
    async with connected(nats, prefix) as client:
        handle = client.handle(task_id)
        record = await (handle.wait_until_done(timeout) if wait else handle.get())
    value = result_of(record)
    if as_json:
        render.print_json(value)
    else:
        render.print_pretty_json(value)
    return ExitCode.OK


def result(
    task_id: TaskIdArgument,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the task to end.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="SECONDS", help="Give up waiting after this long."),
    ] = None,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Print a completed task's result as JSON; exit 1 if it failed, 3 if cancelled."""
    run(_result(nats, prefix, checked_id(task_id), wait, timeout, as_json), as_json)


async def _watch(nats: str, prefix: str, task_id: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        return await follow(client, task_id, render.event_view(as_json))


def watch(
    task_id: TaskIdArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Follow a task's events (and the running step's progress) until it ends."""
    run(_watch(nats, prefix, checked_id(task_id), as_json), as_json)


async def _cancel(nats: str, prefix: str, task_id: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        record = await client.cancel(task_id)
    if as_json:
        render.print_json(record)
    else:
        render.print_lines([f"cancelled task {task_id}"])
    return ExitCode.OK


def cancel(
    task_id: TaskIdArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Cancel an unfinished task; a running step stops within one heartbeat."""
    run(_cancel(nats, prefix, checked_id(task_id), as_json), as_json)


async def _input(nats: str, prefix: str, task_id: str, data: Any, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        await client.send_input(task_id, data)
    if as_json:
        render.print_json({"task_id": task_id, "sent": True})
    else:
        render.print_lines([f"sent input to task {task_id}; it resumes at its next step"])
    return ExitCode.OK


def answer(
    task_id: TaskIdArgument,
    data: Annotated[str, typer.Argument(metavar="JSON", help="The answer, as JSON.")],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Answer a task that is waiting for input."""
    answer = parse_json(data, "the answer")
    run(_input(nats, prefix, checked_id(task_id), answer, as_json), as_json)


# -- many tasks ---------------------------------------------------------------------------


async def _ls(
    nats: str, prefix: str, wanted: TaskStatus | None, limit: int, as_json: bool
) -> ExitCode:
    async with connected(nats, prefix) as client:
        newest, _ = await client.list_page(wanted, limit=limit, newest_first=True)
    if as_json:
        render.print_json(ListReply(tasks=newest))
    else:
        render.print_table(render.tasks_table(newest))
    return ExitCode.OK


def ls(
    status: Annotated[
        TaskStatus | None, typer.Option("--status", help="Only tasks with this status.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="At most this many.")
    ] = 50,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """List tasks, newest first."""
    run(_ls(nats, prefix, status, limit, as_json), as_json)


def register(app: typer.Typer) -> None:
    for command in (submit, status, result, watch, cancel, ls):
        app.command()(command)
    app.command("input")(answer)
