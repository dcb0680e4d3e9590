"""What `tether status`, `result`, `watch`, `cancel`, `input` and `ls` do once their
options are parsed (cli/tasks.py declares them)."""

from __future__ import annotations

from typing import Any, Literal

from tether.cli import render
from tether.cli.common import fail
from tether.cli.following import follow, live_heartbeat
from tether.cli.running import ExitCode, connected
from tether.cli.statuses import told
from tether.client import Client
from tether.errors import TaskCancelledError, TaskFailedError, TaskNotFoundError
from tether.schemas.api import ListReply
from tether.schemas.codec import to_builtins
from tether.schemas.records import TaskRecord, TaskStatus
from tether.tasks.questions import last_question


async def status(
    nats: str, prefix: str, task_id: str, as_json: bool, verbose: bool = False
) -> ExitCode:
    async with connected(nats, prefix) as client:
        record = await client.find(task_id)
        if record is None:
            return await _queued_status(client, task_id, as_json)
        heartbeat = live_heartbeat(record, await client.heartbeat(task_id))
        last = await client.last_event(task_id)
        stall = await client.stall(record)
        dispatcher = record.status.is_terminal or await client.dispatcher_running()
        plan = await client.plan(record) if record.done_steps else record.steps
    if as_json:
        view = to_builtins(record) | {
            "heartbeat": to_builtins(heartbeat),
            "last_event": to_builtins(last),
            "stall": to_builtins(stall),
            "dispatcher_running": dispatcher,
        }
        render.print_json(view)
    else:
        question = last_question(plan)
        table = render.record_table(record, heartbeat, last, stall, dispatcher, question, verbose)
        render.print_table(table)
    return told(record)


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


ResultFormat = Literal["json", "pretty", "text"]
"""`--json`: one compact line; by default indented JSON; `--text`: a string as text."""


async def result(
    nats: str, prefix: str, task_id: str, wait: bool, timeout: float | None, how: ResultFormat
) -> ExitCode:
    async with connected(nats, prefix) as client:
        handle = client.handle(task_id)
        record = await (handle.wait_until_done(timeout) if wait else handle.get())
    value = result_of(record)
    if how == "json":
        render.print_json(value)
    elif how == "text":
        render.print_answer(value)
    else:
        render.print_pretty_json(value)
    return ExitCode.OK


async def watch(nats: str, prefix: str, task_id: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        return await follow(client, task_id, render.event_view(as_json))


async def cancel(nats: str, prefix: str, task_id: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        record = await client.cancel(task_id)
    if as_json:
        render.print_json(record)
    else:
        render.print_lines([f"cancelled task {task_id}"])
    return ExitCode.OK


async def send_input(nats: str, prefix: str, task_id: str, data: Any, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        await client.send_input(task_id, data)
    if as_json:
        render.print_json({"task_id": task_id, "sent": True})
    else:
        render.print_lines([f"sent input to task {task_id}; it resumes at its next step"])
    return ExitCode.OK


async def ls(
    nats: str, prefix: str, wanted: TaskStatus | None, limit: int, as_json: bool
) -> ExitCode:
    async with connected(nats, prefix) as client:
        newest, _ = await client.list_page(wanted, limit=limit, newest_first=True)
    if as_json:
        render.print_json(ListReply(tasks=newest))
    else:
        render.print_table(render.tasks_table(newest))
    return ExitCode.OK
