"""`tether.run_sync(agent, "...")`: one call that runs an agent, a tool or a plan durably
from a script or a notebook, with an embedded nats-server (data in `.tether/`) and a
worker in this process.

The task id is the same for every run of the same target on the same input, so a script
run again after a crash finds the task its killed run started: a completed task answers
at once, one still running is taken up by this run's worker (the dead worker's held
steps are handed on once its beat has been silent for `Liveness.dead_after`), a failed
one is retried from the step that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from tether.agents.agent import Agent
from tether.client import Client, TaskHandle
from tether.dispatcher import Dispatcher
from tether.errors import DefinitionError, InvalidTaskError, TaskExistsError
from tether.integrations.adapters import adapt
from tether.integrations.registry import is_foreign_agent
from tether.local_server import SharedServer
from tether.nats.connection import NatsConfig
from tether.schemas.codec import encode
from tether.schemas.names import Names
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskStatus
from tether.tasks import plans
from tether.tasks.plans import to_step
from tether.tools.app import App
from tether.worker import Worker

PlanStep = StepSpec | dict[str, Any] | str | Callable[..., Any]
"""A step of a plan: a `Step`, its dict, a tool's name, or a tool's function."""
Target = Agent | str | Callable[..., Any] | Sequence[PlanStep] | object
"""An agent (Tether's, Pydantic AI's or the OpenAI Agents SDK's); a tool (its name in
`app`, or its function); or a plan (a list of steps)."""
DRAIN_WITHIN = 5.0
"""Seconds the streamed text may come after the result (`on_token`, `stream`)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Job:
    """What a target comes to: the apps to serve, the plan, and the answer's type."""

    name: str
    apps: list[App]
    steps: list[StepSpec]
    result_type: Any = None

    calls: tuple[str, ...] = ()
    """The tools an agent calls by name."""

    def unserved(self) -> list[str]:
        """The tools the plan (or the agent) names that none of `apps` serves."""
        served = {name for app in self.apps for name in app.tools}
        return sorted((plans.tools_of(self.steps) | set(self.calls)) - served)

    def task_id(self) -> str:
        """`<name>-<hash of the plan>`: the same for the same target and input."""
        digest = hashlib.sha256(encode([self.name, self.steps])).hexdigest()[:20]
        return f"{_UNSAFE.sub('_', self.name)[:64]}-{digest}"


def run_sync(
    target: Target,
    input: Any = None,
    *,
    app: App | None = None,
    task_id: str | None = None,
    data_dir: str | Path = ".tether",
    nats_url: str | None = None,
    prefix: str = "tether",
    timeout: timedelta | float | None = None,
    on_token: Callable[[str], None] | None = None,
    stream: bool | None = None,
) -> Any:
    """`run` for code with no running event loop (a script); see `run`.

    ```python
    answer = tether.run_sync(Agent("helper", model="gpt-4o-mini"), "What is NATS?")
    ```
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = run(
            target,
            input,
            app=app,
            task_id=task_id,
            data_dir=data_dir,
            nats_url=nats_url,
            prefix=prefix,
            timeout=timeout,
            on_token=on_token,
            stream=stream,
        )
        return asyncio.run(running)
    raise RuntimeError(
        "tether.run_sync() was called with an event loop running (a notebook, or async "
        "code): use `await tether.run(...)` there"
    )


async def run(
    target: Target,
    input: Any = None,
    *,
    app: App | None = None,
    task_id: str | None = None,
    data_dir: str | Path = ".tether",
    nats_url: str | None = None,
    prefix: str = "tether",
    timeout: timedelta | float | None = None,
    on_token: Callable[[str], None] | None = None,
    stream: bool | None = None,
) -> Any:
    """Run `target` on `input` as a durable task and return its result.

    Args:
        target: an `Agent` (its answer, typed as its `output_type`), a tool of `app` (its
            name or function) given `input`, or a plan: a list of steps (`input` unused).
        app: the tools the target calls (an agent's function tools are added for you).
        task_id: the task's id; default: derived from the target and input, so that a
            run again after a crash resumes the same task.
        data_dir: where the embedded nats-server keeps its data (shared with any script,
            or `tether dev`, running there now), and the token it takes: the directory
            is made 0700 and the token file 0600, so no other local user gets in.
        nats_url: a running NATS server instead of an embedded one.
        timeout: raise TaskTimeoutError after this long (the task goes on).
        on_token: get the text the steps stream, piece by piece, as it comes.
        stream: print that text to stdout as it comes (True), or nothing (False); by
            default, on a terminal, one line on stderr rewritten as it comes (how much,
            and the last words), erased once the answer is in: a model that rambles is
            not silent.

    Raises:
        TaskFailedError: the task failed (a run again retries it from the failed step).
        TaskCancelledError: it was cancelled.
    """
    job = job_of(target, input, app)
    if nats_url is None and (unserved := job.unserved()):
        raise DefinitionError(
            f"no tool {', '.join(map(repr, unserved))} here for the task to run: pass "
            "app=... with them, or their functions (an embedded server has no other worker)"
        )
    task = task_id or job.task_id()
    line = None
    if on_token is None and stream:
        on_token = _print_token
    elif on_token is None and stream is None and sys.stderr.isatty():
        line = WritingLine(sys.stderr)
        on_token = line.add
    async with _nats(nats_url, data_dir) as (url, token):
        config = NatsConfig(url=url, token=token, names=Names(prefix=prefix), name="tether-run")
        worker = Worker(job.apps, config) if job.apps else contextlib.nullcontext()
        async with Client(config) as client, worker, Dispatcher(config):
            handle = await _start(client, task, job)
            printing = None if on_token is None else asyncio.create_task(_tokens(handle, on_token))
            try:
                return await handle.wait(timeout)
            finally:
                if printing is not None:
                    await _finish(printing)
                if line is not None:
                    line.clear()


def job_of(target: Target, input: Any, app: App | None) -> Job:
    """The job `target` comes to (see `run`). Whatever `app` lacks (the agent, its
    function tools, a function given) goes in a second app; `app` is left as it is."""
    tools = _Tools(app)
    if is_foreign_agent(target):  # a Pydantic AI or Agents SDK agent: its adapter's tool
        name = tools.add_foreign(target)
        return Job(name, tools.apps(), [StepSpec(tool=name, input={"input": input})])
    if isinstance(target, Agent):
        tools.add(target)
        for used in target.tools:
            if not isinstance(used, str):
                tools.serve(used)
        result_type = None if target.output is None else target.output.type
        steps = [StepSpec(tool=target.name, input={"input": input})]
        return Job(target.name, tools.apps(), steps, result_type, target.tool_names)
    if isinstance(target, str) or callable(target):
        name = target if isinstance(target, str) else tools.serve(target)
        wrapped = {"input": input} if tools.is_agent(name) else input
        return Job(name, tools.apps(), [StepSpec(tool=name, input=wrapped)])
    if not isinstance(target, Sequence):
        raise DefinitionError(
            f"cannot run {type(target).__name__}: give an agent, a tool or a plan (a list of steps)"
        )
    if input is not None:
        raise InvalidTaskError(
            "a plan takes no separate input: give each step its own ({'tool': ..., 'input': ...})"
        )
    steps = [to_step(tools.serve(step) if callable(step) else step) for step in target]
    return Job("plan", tools.apps(), steps)


class _Tools:
    """The user's app, and one of ours for what it lacks."""

    def __init__(self, app: App | None) -> None:
        self._app = app
        self._own = App("tether-run")

    def _has(self, name: str) -> bool:
        return name in self._own.tools or (self._app is not None and name in self._app.tools)

    def add(self, agent: Agent) -> None:
        if not self._has(agent.name):
            self._own.add(agent)

    def add_foreign(self, agent: object) -> str:
        tool = adapt(agent)
        if not self._has(tool.name):
            self._own.add_tool(tool)
        return tool.name

    def serve(self, function: Callable[..., Any]) -> str:
        name: str = function.__name__
        if not self._has(name):
            self._own.tool(function)
        return name

    def is_agent(self, name: str) -> bool:
        for app in (self._own, self._app):
            if app is not None and name in app.tools:
                return app.tools[name].agent
        raise DefinitionError(
            f"tool {name!r} is in no app: pass app=... with it, or pass the function itself"
        )

    def apps(self) -> list[App]:
        return [app for app in (self._app, self._own) if app is not None and app.tools]


@contextlib.asynccontextmanager
async def _nats(url: str | None, data_dir: str | Path) -> AsyncIterator[tuple[str, str | None]]:
    """The given URL as it is, or the embedded server's with its token."""
    if url is not None:
        yield url, None
        return
    server = SharedServer(data_dir)
    try:
        yield await server.open(), server.token
    finally:
        await server.close()


async def _start(client: Client, task_id: str, job: Job) -> TaskHandle:
    """Submit the task, or pick up the one a run before this one started."""
    found = await client.find(task_id)
    if found is None:
        with contextlib.suppress(TaskExistsError):  # a script beside this one submitted it
            await client.submit(job.steps, task_id=task_id)
    elif found.status is TaskStatus.FAILED:
        await client.retry(task_id)
    handle = client.handle(task_id)
    handle.result_type = job.result_type
    return handle


async def _tokens(handle: TaskHandle, on_token: Callable[[str], None]) -> None:
    async for chunk in handle.stream():
        if chunk.delta:
            on_token(chunk.delta)


async def _finish(printing: asyncio.Task[None]) -> None:
    """Let the token feed reach its end (it ends once the task has and every chunk is
    seen), within `DRAIN_WITHIN`: the result can come before the last chunks do."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(printing), DRAIN_WITHIN)
    printing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await printing


class WritingLine:
    """One terminal line, rewritten as text streams: how many pieces so far, and the
    last words that fit."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.pieces = 0
        self.tail = ""

    def add(self, text: str) -> None:
        self.pieces += 1
        self.tail = (self.tail + text)[-400:]  # more than a line holds
        head = f"writing, {self.pieces} pieces: "
        words = " ".join(self.tail.split())
        room = max(10, shutil.get_terminal_size().columns - len(head) - 2)
        shown = words if len(words) <= room else "..." + words[3 - room :]
        self.out.write(f"\r\033[K{head}{shown}")
        self.out.flush()

    def clear(self) -> None:
        if self.pieces:
            self.out.write("\r\033[K")
            self.out.flush()


def _print_token(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
