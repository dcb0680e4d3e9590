"""Child tasks: a tool starts a sub-task and its step completes with the child's result,
holding no worker slot while the child runs; cancel reaches the children."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker
from tether import (
    Client,
    TaskFailedError,
)
from tether.schemas import TaskStatus
from tether.testing import eventually


async def test_a_step_completes_with_its_childs_result(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app, concurrency=1)  # one slot for parent and child
    steps = [{"tool": "fast", "input": "child"}, {"tool": "slow", "input": {"sleep": 0.2}}]
    given = {"steps": steps, "metadata": {"why": "sub-agent"}}
    handle = await client.submit([{"tool": "delegates", "input": given}, "fast"])

    result = await handle.wait(timeout=20)

    parent = await handle.get()
    assert len(parent.children) == 1 and parent.awaiting is None
    child = await client.get(parent.children[0])
    assert child.parent is not None
    assert (child.parent.task_id, child.parent.step) == (handle.task_id, 0)
    assert child.metadata == {"why": "sub-agent"}
    assert result == {"step": 1, "payload": child.result}
    counts = read_executions(executions)
    assert [counts[(child.task_id, 0)], counts[(child.task_id, 1)]] == [1, 1]
    assert counts[(handle.task_id, 1)] == 1


async def test_a_failed_child_fails_its_parents_step(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app, concurrency=1)  # one slot for parent and child
    handle = await client.submit(
        [{"tool": "delegates", "input": {"steps": [{"tool": "refuses", "input": {}}]}}, "fast"]
    )
    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)
    assert failure.value.error is not None and failure.value.error.type == "ChildFailed"
    assert "permission denied" in failure.value.error.message
    assert (await handle.get()).failed_step == 0


async def test_a_child_whose_input_wait_expires_fails_its_parents_step(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    """A child failed by a timer (not by a worker) resumes its parent all the same: before,
    the parent waited for it until its own deadline, or for ever."""
    await make_worker(app, concurrency=1)  # one slot for parent and child
    child_steps = [{"tool": "asks_briefly", "input": {"timeout": 0.5}}]
    handle = await client.submit([{"tool": "delegates", "input": {"steps": child_steps}}, "fast"])
    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)
    assert failure.value.error is not None and failure.value.error.type == "ChildFailed"
    assert "InputExpired" in failure.value.error.message


async def test_a_child_with_no_steps_fails_the_step_at_once(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app, concurrency=1)  # one slot for parent and child
    handle = await client.submit([{"tool": "delegates", "input": {"steps": []}}])
    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)
    assert failure.value.error is not None and "has no steps" in failure.value.error.message
    assert (await handle.get()).failed_step == 0


async def test_cancelling_the_parent_cancels_the_child(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app, concurrency=1)  # one slot for parent and child
    steps = [{"tool": "slow", "input": {"sleep": 30}}]
    handle = await client.submit([{"tool": "delegates", "input": {"steps": steps}}])
    parent = await handle.wait_for(lambda r: bool(r.children), timeout=10)
    child_id = parent.children[0]
    await eventually(lambda: _running(client, child_id), timeout=10)

    await handle.cancel()

    await eventually(lambda: _status(client, child_id, TaskStatus.CANCELLED), timeout=10)


async def test_a_cancelled_child_fails_its_parent(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app, concurrency=1)  # one slot for parent and child
    handle = await client.submit(
        [{"tool": "delegates", "input": {"steps": [{"tool": "slow", "input": {"sleep": 30}}]}}]
    )
    parent = await handle.wait_for(lambda r: bool(r.children), timeout=10)
    await client.cancel(parent.children[0])

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)
    assert failure.value.error is not None and failure.value.error.type == "ChildCancelled"


async def _running(client: Client, task_id: str) -> None:
    assert (await client.get(task_id)).status is TaskStatus.RUNNING


async def _status(client: Client, task_id: str, status: TaskStatus) -> None:
    assert (await client.get(task_id)).status is status
