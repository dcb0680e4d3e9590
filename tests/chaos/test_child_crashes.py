"""A worker killed (SIGKILL) between creating a child task's record and handing it off:
the child is started, or cancelled, and always listed in its parent's `children`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.apps import children_tools
from tests.apps.tools import app, read_executions
from tests.chaos.crashes import crash, survive
from tests.conftest import APP
from tether import Client, NatsConfig, TaskFailedError, TaskRecord, TaskStatus, Worker
from tether.testing import eventually

pytestmark = pytest.mark.slow

CHILD_PLAN = [{"tool": "fast", "input": "from the child"}]
CHILDREN = "tests.apps.children_tools:app"


def delegating(parent_id: str, **step: Any) -> list[Any]:
    """A parent whose step 0 starts a child (`<parent_id>-s0`), then one more step."""
    return [{"tool": "delegates", "input": {"steps": CHILD_PLAN}, **step}, "fast"]


async def crash_after_creating_the_child(
    config: NatsConfig,
    child_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app: str = APP,
) -> None:
    await crash(config, f"child-created:{child_id}:0", tmp_path, monkeypatch, app)


async def cancelled(client: Client, task_id: str) -> TaskRecord:
    record = await client.get(task_id)
    assert record.status is TaskStatus.CANCELLED, record
    return record


async def test_a_step_that_gives_up_cancels_the_child_it_never_handed_off(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The step's run after the crash fails for good instead of finishing the hand-off (a
    crash alone charges no attempt, so only the step itself can give up here)."""
    parent_id = "orphan-refused"
    child_id = f"{parent_id}-s0"
    given = {"steps": [{"tool": "echo", "input": "from the child"}]}
    step = {"tool": "delegates_then_refuses", "input": given}
    handle = await client.submit([step, "echo"], task_id=parent_id)
    await crash_after_creating_the_child(config, child_id, tmp_path, monkeypatch, CHILDREN)

    async with Worker(children_tools.app, config):
        with pytest.raises(TaskFailedError):
            await handle.wait(timeout=30)
        child = await eventually(lambda: cancelled(client, child_id), timeout=10)

    parent = await client.get(parent_id)
    assert parent.error is not None and parent.error.type == "TerminalError"
    assert parent.starting == [child_id]  # its start never got past creating it
    assert child.parent is not None and child.parent.task_id == parent_id
    assert read_executions(executions)[(child_id, 0)] == 0


async def test_a_parent_failed_by_its_deadline_cancels_the_child_it_never_handed_off(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No worker survives: the dispatcher's deadline timer fails the parent, and with it
    goes the child (which has no timer of its own: its hand-off never happened)."""
    parent_id = "orphan-deadline"
    child_id = f"{parent_id}-s0"
    handle = await client.submit(
        delegating(parent_id), task_id=parent_id, deadline=timedelta(seconds=6)
    )
    await crash_after_creating_the_child(config, child_id, tmp_path, monkeypatch)

    with pytest.raises(TaskFailedError):
        await handle.wait(timeout=30)
    await eventually(lambda: cancelled(client, child_id), timeout=10)

    parent = await client.get(parent_id)
    assert parent.error is not None and parent.error.type == "DeadlineExceeded"
    assert parent.starting == [child_id]


async def test_cancelling_the_parent_reaches_the_child_it_never_handed_off(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent_id = "orphan-cancelled"
    child_id = f"{parent_id}-s0"
    await client.submit(delegating(parent_id), task_id=parent_id)
    await crash_after_creating_the_child(config, child_id, tmp_path, monkeypatch)

    parent = await client.cancel(parent_id)

    assert parent.starting == [child_id]
    await cancelled(client, child_id)


async def test_a_step_run_again_after_the_crash_hands_the_child_off_once(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent_id = "orphan-retried"
    child_id = f"{parent_id}-s0"
    handle = await client.submit(delegating(parent_id), task_id=parent_id)
    await crash_after_creating_the_child(config, child_id, tmp_path, monkeypatch)

    result = await survive(config, handle)

    assert result == {"step": 1, "payload": {"step": 0, "payload": "from the child"}}
    counts = read_executions(executions)
    assert counts[(child_id, 0)] == 1
    assert counts[(parent_id, 0)] == 2  # the crashed attempt, then the one that went on
    parent = await client.get(parent_id)
    assert parent.children == [child_id] and parent.starting == []
    assert (await client.get(child_id)).status is TaskStatus.COMPLETED


async def test_a_taken_child_id_is_listed_but_its_task_is_left_alone(
    config: NatsConfig, client: Client, dispatcher: object, registered: None
) -> None:
    """The parent lists a child before creating it, so a step whose child id names
    another task lists that id, then gives up; the parent's failure (or cancel) must not
    reach a task that is no child of it."""
    parent_id = "orphan-taken"
    taken = await client.submit([{"tool": "nobody-serves", "input": {}}], task_id=f"{parent_id}-s0")
    handle = await client.submit(delegating(parent_id), task_id=parent_id)

    async with Worker(app, config):
        with pytest.raises(TaskFailedError) as failure:
            await handle.wait(timeout=30)

    assert failure.value.error is not None and failure.value.error.type == "InvalidPlan"
    assert (await taken.get()).status is TaskStatus.PENDING
