"""What the tests of foreign agents (Pydantic AI and the OpenAI Agents SDK, in
tests/apps/pydantic_agents.py and openai_agents.py) share: scripts for the scripted
model and counts from its log, the tools' executions and gates, and a worker process
that a test SIGKILLs once the task is where it wants it."""

from __future__ import annotations

import importlib
import json
import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NoKeysError

from tests.chaos.crashes import survive
from tests.conftest import raw_connection, start_worker
from tether import App, NatsConfig, TaskHandle, TaskRecord, TaskStatus, Worker
from tether.schemas.records import Usage
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

OPENAI_AGENTS = "tests.apps.openai_agents:app"
PYDANTIC_AGENTS = "tests.apps.pydantic_agents:app"
Submit = Callable[[], Awaitable[TaskHandle]]
Until = Callable[[TaskHandle], Awaitable[object]]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted turn that calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def chores(batch: str, *names: str, slow: str | None = None) -> dict[str, Any]:
    """A scripted turn that asks for chores `names` at once (tests/apps/foreign.py), the
    one named `slow` held at its gate (`<batch>-<slow>`) and asked first."""
    order = sorted(names, key=lambda name: name != slow)
    arguments = [{"batch": batch, "name": name, "of": len(names)} for name in order]
    calls = [
        {"name": "slow_chore" if a["name"] == slow else "chore", "arguments": a} for a in arguments
    ]
    return {"tool_calls": calls}


def timeline(executions: Path, batch: str) -> list[str]:
    """What the chores of `batch` did, in order: `a started`, `b started`, `a ended`..."""
    lines = [line.split() for line in executions.read_text().splitlines()]
    return [f"{w[2]} {w[3]}" for w in lines if w[:2] == ["chore", batch]]


async def journaled(config: NatsConfig, task_id: str, name: str) -> int:
    """How many units of `task_id`'s journal are named `name` or end in `:<name>`/`.<name>`
    (a tool's calls: `tool.chore` for the SDK, `...call_tool:chore` for Pydantic AI)."""
    async with raw_connection(config.url) as raw:
        bucket = await raw.js.key_value(config.names.checkpoints_bucket)
        try:
            stored = await bucket.keys()
        except NoKeysError:
            return 0
        keys = [k for k in stored if k.startswith(f"{task_id}.") and ".once." in k]
        names = []
        for key in keys:
            entry = await bucket.get(key)
            names.append(json.loads(entry.value or b"{}").get("name", ""))
    return sum(1 for n in names if n == name or n.endswith((f":{name}", f".{name}")))


def usage(prompt: int, completion: int) -> dict[str, int]:
    """A turn's `usage`, as the scripted model reports it."""
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def turns(model: ScriptedModel, question: str) -> Counter[int]:
    """How many times each turn of the conversation `question` was sent to the model."""
    return Counter(r["turn"] for r in model.requests(question))


def ran(executions: Path, tag: str) -> int:
    """How many times a tool ran with `tag` (its name, and the arguments it records)."""
    return sum(1 for line in executions.read_text().splitlines() if line.startswith(tag + " "))


def executed(executions: Path) -> Counter[str]:
    """How many times each tool ran, by name."""
    return Counter(line.split()[0] for line in executions.read_text().splitlines())


def at_gate(gates: Path, key: str) -> Until:
    """Until the run waits at the gate `key` (which the test opens with `open_gate`)."""

    async def reached(handle: TaskHandle) -> None:
        started = gates / f"{key}.started"
        await wait_until(started.exists, timeout=30, message=f"the run to reach gate {key}")

    return reached


def open_gate(gates: Path, key: str) -> None:
    (gates / f"{key}.go").touch()


async def waiting(handle: TaskHandle) -> TaskRecord:
    """The task's record once it waits for a person."""
    return await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)


async def spent(handle: TaskHandle) -> Usage:
    """What the task's model calls spent, as its record counts it."""
    record = await handle.get()
    assert record.usage is not None, record
    return record.usage


@dataclass(frozen=True)
class Crashes:
    """The agents of one test app (`app`, as `module:attribute`) run on `tether worker`
    processes that the test SIGKILLs where it wants, and a fresh worker finishes."""

    config: NatsConfig
    app: str
    folder: Path
    monkeypatch: pytest.MonkeyPatch

    async def register(self) -> Crashes:
        """The app's agents registered (as a worker does at start), no worker left."""
        async with Worker(self._app(), self.config):
            pass
        return self

    def gates(self) -> Path:
        """A gates folder for the tools that wait at one (tests/apps/foreign.py), seen
        by the workers started from now on."""
        path = self.folder / "gates"
        path.mkdir(exist_ok=True)
        self.monkeypatch.setenv("TETHER_TEST_GATES", str(path))
        return path

    async def killed_when(self, submit: Submit, until: Until) -> TaskHandle:
        """The task `submit` starts, on a worker process that is SIGKILLed once
        `until(handle)` returns (or raises: a test that times out leaves no worker)."""
        process = start_worker(self.config, self.app, log=self.folder / "doomed.log")
        try:
            handle = await submit()
            await until(handle)
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        return handle

    async def survive(self, handle: TaskHandle) -> Any:
        """The task's result from a fresh worker (in this process)."""
        return await survive(self.config, handle, self.app)

    def _app(self) -> App:
        module, _, attribute = self.app.partition(":")
        found: App = getattr(importlib.import_module(module), attribute)
        return found
