"""A worker killed (SIGKILL) after it wrote a task's `failed` record and before it said so
(issue 37): the redelivery of the step's message sends the `failed` event, and for a
branch stops the sibling branches, so followers end with the reason."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.apps import failing_tools
from tests.apps.tools import app as tools_app
from tests.chaos.crashes import crash
from tests.conftest import APP, ROOT, Raw
from tether import Client, NatsConfig, Parallel, Step, TaskFailedError, TaskHandle, Worker
from tether.schemas.events import AnyStatusEvent, Failed
from tether.schemas.records import TaskStatus
from tether.testing import eventually, wait_until

pytestmark = pytest.mark.slow

FAILING_APP = "tests.apps.failing_tools:app"
SIBLINGS = 2
"""Branches 0 and 1 sleep for a minute in another worker; branch 2 fails the task."""


async def failed_events(client: Client, task_id: str) -> list[Failed]:
    return [e for e in await client.history(task_id) if isinstance(e, Failed)]


async def crash_after_the_failed_record(
    config: NatsConfig,
    client: Client,
    task_id: str,
    where: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app: str = APP,
) -> None:
    """The worker dies between the failed record and its event: nothing says it yet."""
    await crash(config, f"failed-recorded:{task_id}:{where}", tmp_path, monkeypatch, app)
    record = await client.get(task_id)
    assert record.status is TaskStatus.FAILED, record
    assert await failed_events(client, task_id) == []


async def said_failed(client: Client, task_id: str) -> None:
    assert await failed_events(client, task_id), "no failed event after the redelivery"


def steps(executions: Path, tag: str = "") -> set[str]:
    """The steps (`<step>`, `<step>.b<branch>`) whose execution lines carry `tag`: `""`
    for a start (see `tests.apps.tools.record`)."""
    found = (line.split(" ") for line in executions.read_text().splitlines())
    return {where for _, where, _, _, said in found if said == tag}


async def follow(handle: TaskHandle) -> list[AnyStatusEvent]:
    """A follower's events, up to the end of the task's run."""
    return [event async for event in handle.events()]


async def settled(raw: Raw, config: NatsConfig) -> None:
    """Every work message was settled (the work stream is a work queue)."""

    async def empty() -> bool:
        info = await raw.js.stream_info(config.names.work_stream)
        return info.state.messages == 0

    await wait_until(empty, timeout=20, message="every work message settled")


async def watch(config: NatsConfig, task_id: str) -> tuple[int, str]:
    """`tether watch`: its exit code and what it printed."""
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tether.cli", "watch", task_id],
        *["--nats", config.url, "--prefix", config.names.prefix],
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.fixture
async def failing_registered(config: NatsConfig) -> AsyncIterator[None]:
    """The failing and the sleeping tools registered, with no worker of them left."""
    async with Worker(failing_tools.app, config), Worker(failing_tools.bystanders, config):
        pass
    yield


async def test_a_step_that_failed_says_so_after_its_worker_died(
    config: NatsConfig,
    client: Client,
    raw: Raw,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_id = "fails-then-dies"
    handle = await client.submit([{"tool": "refuses", "input": {}}], task_id=task_id)
    await crash_after_the_failed_record(config, client, task_id, "0", tmp_path, monkeypatch)
    follower = asyncio.create_task(follow(handle))  # following since before the survivor

    try:
        async with Worker(tools_app, config):
            await eventually(lambda: said_failed(client, task_id), timeout=15)
            events = await asyncio.wait_for(follower, 10)
            await settled(raw, config)
    finally:
        follower.cancel()

    (failed,) = await failed_events(client, task_id)
    assert (failed.step, failed.branch, failed.attempt) == (0, None, 1)
    assert failed.error is not None and failed.error.message == "permission denied"
    assert isinstance(events[-1], Failed) and events[-1].error == failed.error
    with pytest.raises(TaskFailedError, match="permission denied"):
        await handle.wait(timeout=10)
    code, out = await watch(config, task_id)
    assert code == 1, out
    assert "TerminalError: permission denied" in out, out
    assert [line.split()[1] for line in out.splitlines()].count("failed") == 1, out
    await client.retry(task_id)  # a new run forgets who failed the last one
    retried = await client.get(task_id)
    assert (retried.failed_step, retried.failed_branch, retried.failed_attempt) == (None,) * 3


async def test_a_branch_that_failed_stops_its_siblings_after_its_worker_died(
    config: NatsConfig,
    client: Client,
    raw: Raw,
    failing_registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_id = "branch-fails-then-dies"
    siblings = [Step(tool="lingers", input={"sleep": 60}) for _ in range(SIBLINGS)]
    plan = [Parallel(*siblings, Step(tool="denies", input={}))]
    siblings_run = {f"0.b{b}" for b in range(SIBLINGS)}

    async with Worker(failing_tools.bystanders, config):  # the siblings run here
        handle = await client.submit(plan, task_id=task_id)
        await wait_until(
            lambda: steps(executions) == siblings_run, message="the sibling branches running"
        )
        await crash_after_the_failed_record(
            config, client, task_id, f"0.b{SIBLINGS}", tmp_path, monkeypatch, FAILING_APP
        )

        async with Worker(failing_tools.app, config):
            await eventually(lambda: said_failed(client, task_id), timeout=15)
            # the notice stops them now, not at the bystander's next look at its tasks
            await wait_until(
                lambda: steps(executions, "stopped") == siblings_run,
                timeout=5,
                message="the sibling branches stopped",
            )
            await settled(raw, config)

    (failed,) = await failed_events(client, task_id)
    assert (failed.step, failed.branch, failed.attempt) == (0, SIBLINGS, 1)
    assert failed.error is not None and failed.error.message == "access denied"
    assert steps(executions, "woke") == set()
    with pytest.raises(TaskFailedError, match="access denied"):
        await handle.wait(timeout=10)
