"""Operator commands: submit, status, result, watch, cancel, input, ls and the dead letters.

Every command runs one coroutine with `asyncio.run` through `run`, which turns
Tether's errors into one line on stderr and an exit code from `ExitCode`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Coroutine
from datetime import timedelta
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any

import msgspec
import nats.errors
import typer
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from tether.api.errors import error_reply
from tether.cli import render
from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    JsonOption,
    NatsOption,
    PrefixOption,
    fail,
    nats_config,
)
from tether.client import Client
from tether.errors import (
    TaskCancelledError,
    TaskExistsError,
    TaskFailedError,
    TaskNotFoundError,
    TetherError,
)
from tether.nats.cancellation import raise_if_cancelled
from tether.nats.store import Store
from tether.schemas.api import ListReply, SubmitReply, SubmitRequest
from tether.schemas.codec import event_decoder, to_builtins
from tether.schemas.events import TERMINAL_EVENTS, AnyStatusEvent
from tether.schemas.ids import InvalidNameError, validate_task_id
from tether.schemas.tasks import DeadLetter, Heartbeat, StepSpec, TaskRecord, TaskStatus


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
    TaskStatus.COMPLETED: ExitCode.OK,
    TaskStatus.FAILED: ExitCode.FAILED,
    TaskStatus.CANCELLED: ExitCode.CANCELLED,
}
HEARTBEAT_POLL = 0.3
"""Seconds between reads of the heartbeat bucket while watching a terminal."""
CATCH_UP = 2.0
"""Seconds `watch` waits for the terminal event after the record has ended.

The record changes first and its event follows at once; the wait only matters if the
writer died in between, when the record alone decides the outcome.
"""

_dead_letter_decoder = msgspec.json.Decoder(DeadLetter)

TaskIdArgument = Annotated[str, typer.Argument(metavar="ID", help="The task id.")]


# -- running a command ------------------------------------------------------------


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
    except (TetherError, InvalidNameError, nats.errors.Error, OSError) as exc:
        message, code = describe(exc)
        if as_json:
            reply = error_reply(exc)
            error = msgspec.structs.replace(reply.error, message=" ".join(message.split()))
            typer.echo(msgspec.json.encode(msgspec.structs.replace(reply, error=error)))
            raise typer.Exit(code) from None
        fail(" ".join(message.split()), code)
    raise typer.Exit(code)


def describe(exc: Exception) -> tuple[str, ExitCode]:
    """The message and exit code of an error a command let through."""
    if isinstance(exc, TaskNotFoundError):
        return str(exc), ExitCode.NOT_FOUND
    if isinstance(exc, TaskFailedError):
        return str(exc), ExitCode.FAILED
    if isinstance(exc, TaskCancelledError):
        return str(exc), ExitCode.CANCELLED
    if isinstance(exc, TaskExistsError):
        return (
            f"task {exc.task_id!r} already exists: follow it with 'tether watch {exc.task_id}' "
            "or submit with another --id",
            ExitCode.ERROR,
        )
    if isinstance(exc, TetherError | InvalidNameError):
        return str(exc), ExitCode.ERROR
    return (
        f"NATS request failed ({exc or type(exc).__name__}): check that the server is up "
        "and reachable (--nats / TETHER_NATS_URL)",
        ExitCode.ERROR,
    )


@contextlib.asynccontextmanager
async def connected(nats: str, prefix: str) -> AsyncIterator[Client]:
    async with Client(nats_config(nats, prefix)) as client:
        yield client


def checked_id(task_id: str) -> str:
    """The id if it can name a task; ids are parts of subjects and keys."""
    try:
        return validate_task_id(task_id)
    except InvalidNameError as exc:
        fail(str(exc))


def outcome(record: TaskRecord) -> ExitCode:
    """Exit code of a task that has ended (ERROR if it has not)."""
    return OUTCOMES.get(record.status, ExitCode.ERROR)


# -- reading state the Store has no method for yet --------------------------------


async def list_dead_letters(store: Store, limit: int) -> list[DeadLetter]:
    """The latest `limit` dead letters, oldest first."""
    info = await store.js.stream_info(store.names.dead_letter_stream)
    state = info.state
    if not state.messages:
        return []
    start = max(state.first_seq, state.last_seq - limit + 1)
    sub = await store.js.subscribe(
        store.names.dead_letter_subjects,
        stream=store.names.dead_letter_stream,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start),
    )
    letters: list[DeadLetter] = []
    try:
        while True:
            msg = await sub.next_msg(timeout=5)
            with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
                letters.append(_dead_letter_decoder.decode(msg.data))  # skip foreign junk
            if msg.metadata.num_pending == 0:
                return letters[-limit:]
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def last_event(store: Store, task_id: str) -> AnyStatusEvent | None:
    try:
        msg = await store.js.get_last_msg(
            store.names.status_stream, store.names.status_subject(task_id)
        )
    except NotFoundError:
        return None
    return event_decoder.decode(msg.data) if msg.data else None


def live_heartbeat(record: TaskRecord, heartbeat: Heartbeat | None) -> Heartbeat | None:
    """The heartbeat if it belongs to the running step (it outlives its step by a TTL)."""
    if heartbeat is None or record.status is not TaskStatus.RUNNING:
        return None
    return heartbeat if heartbeat.step == record.current_step else None


# -- following a task ---------------------------------------------------------------


class EventFeed:
    """Every status event of a task, history first, into a view.

    Unlike `TaskHandle.events()` it does not stop at the first terminal event: a
    retried task has an old `failed` in its history. `ended` is set while the newest
    event seen is terminal and nothing is pending after it.
    """

    def __init__(self, store: Store, task_id: str, view: render.EventView) -> None:
        self._store = store
        self._task_id = task_id
        self._view = view
        self.ended = asyncio.Event()

    async def run(self) -> None:
        subject = self._store.names.status_subject(self._task_id)
        sub = await self._store.js.subscribe(
            subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        try:
            while True:
                raise_if_cancelled()  # next_msg can eat the cancel that ends the feed
                try:
                    msg = await sub.next_msg(timeout=60)
                except nats.errors.TimeoutError:
                    continue
                event = event_decoder.decode(msg.data)
                self._view.event(event)
                if isinstance(event, TERMINAL_EVENTS) and msg.metadata.num_pending == 0:
                    self.ended.set()
                else:
                    self.ended.clear()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def poll_heartbeats(store: Store, task_id: str, view: render.EventView) -> None:
    while True:
        try:
            view.heartbeat(await store.get_heartbeat(task_id))
        except (nats.errors.Error, OSError):
            pass  # reconnecting: the bar just pauses
        raise_if_cancelled()
        await asyncio.sleep(HEARTBEAT_POLL)


async def follow(
    client: Client, task_id: str, view: render.EventView, *, submitted: bool = False
) -> ExitCode:
    """Show the task's events (and progress) until it ends; the record decides the outcome.

    `submitted`: the task was just published, so its record may not exist yet (the
    dispatcher creates it); otherwise a missing record is an unknown id.
    """
    handle = client.handle(task_id)
    if not submitted:
        await handle.get()
    feed = EventFeed(client.store, task_id, view)
    helpers = [asyncio.create_task(feed.run())]
    if view.shows_progress:
        helpers.append(asyncio.create_task(poll_heartbeats(client.store, task_id, view)))
    try:
        with view:
            record = await handle.wait_until_done()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(feed.ended.wait(), CATCH_UP)
            view.finish(record)
    finally:
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    return outcome(record)


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


def build_request(
    steps: list[str], file: str | None, task_id: str | None, meta: list[str], deadline: float | None
) -> SubmitRequest:
    """The task to submit; options on the command line win over the file's fields."""
    if file is not None and steps:
        fail("give the steps either as arguments or with --file, not both")
    if file is None and not steps:
        fail("no steps: name tools to run, e.g. 'tether submit search summarize', or use --file")
    base = read_task_file(file) if file else SubmitRequest(steps=[parse_step(s) for s in steps])
    if deadline is not None and deadline <= 0:
        fail(f"--deadline {deadline} is not a positive number of seconds")
    return SubmitRequest(
        steps=base.steps,
        task_id=task_id or base.task_id,
        metadata={**base.metadata, **parse_meta(meta)},
        deadline_ms=int(deadline * 1000) if deadline is not None else base.deadline_ms,
    )


async def _submit(
    nats: str, prefix: str, request: SubmitRequest, wait: bool, as_json: bool
) -> ExitCode:
    async with connected(nats, prefix) as client:
        deadline = request.deadline_ms
        handle = await client.submit(
            request.steps,
            task_id=request.task_id,
            metadata=request.metadata,
            deadline=None if deadline is None else timedelta(milliseconds=deadline),
        )
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
            help="Steps in order; JSON is the step's input (else the previous output).",
            show_default=False,
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
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Submit a task and print its id."""
    request = build_request(steps or [], file, task_id, meta or [], deadline)
    run(_submit(nats, prefix, request, wait, as_json), as_json)


# -- one task -------------------------------------------------------------------------


async def _status(nats: str, prefix: str, task_id: str, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        record = await client.get(task_id)
        heartbeat = live_heartbeat(record, await client.store.get_heartbeat(task_id))
        last = await last_event(client.store, task_id)
    if as_json:
        view = to_builtins(record) | {
            "heartbeat": to_builtins(heartbeat),
            "last_event": to_builtins(last),
        }
        render.print_json(view)
    else:
        render.print_table(render.record_table(record, heartbeat, last))
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
        records = await client.list(wanted)
    newest = sorted(records, key=lambda r: r.updated_at, reverse=True)[:limit]
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
    """List tasks, most recently updated first."""
    run(_ls(nats, prefix, status, limit, as_json), as_json)


async def _dlq_ls(nats: str, prefix: str, limit: int, as_json: bool) -> ExitCode:
    async with connected(nats, prefix) as client:
        letters = await list_dead_letters(client.store, limit)
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
        found = await client.store.get_record(task_id)
        if found is not None:
            statuses[task_id] = found.record.status
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


def register(app: typer.Typer) -> None:
    for command in (submit, status, result, watch, cancel, ls):
        app.command()(command)
    app.command("input")(answer)
    dlq = typer.Typer(help="Dead letters: steps Tether gave up on.", no_args_is_help=True)
    dlq.command("ls")(dlq_ls)
    dlq.command("retry")(dlq_retry)
    app.add_typer(dlq, name="dlq")
