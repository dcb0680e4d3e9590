"""Cancellation, waiting for input, dynamic plans and memoized side effects."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker, Raw
from tether import (
    App,
    Client,
    InvalidTaskError,
    NatsConfig,
    StepContext,
    TaskCancelledError,
    TaskConflictError,
    Worker,
)
from tether.nats.store import Store
from tether.schemas import Cancelled, TaskStatus, Waiting
from tether.schemas.names import Names
from tether.testing import eventually, wait_until


async def test_cancel_a_queued_task(
    config: NatsConfig, client: Client, store: Store, dispatcher: object, executions: Path
) -> None:
    async with Worker(app, config):
        pass  # registers the tools, then stops: the task stays queued at step 0
    handle = await client.submit([{"tool": "fast", "input": 1}], task_id="queued")
    await eventually(lambda: _status(store, "queued", TaskStatus.PENDING))

    record = await client.cancel("queued")

    assert record.status is TaskStatus.CANCELLED
    with pytest.raises(TaskCancelledError):
        await handle.wait(timeout=5)
    events = [e async for e in handle.events(timeout=5)]
    assert isinstance(events[-1], Cancelled)
    assert read_executions(executions)[("queued", 0)] == 0


async def test_cancel_a_running_step_within_a_heartbeat(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 30}}, {"tool": "fast"}])
    await eventually(lambda: _executed(executions, handle.task_id, 0))

    await handle.cancel()

    with pytest.raises(TaskCancelledError):
        await handle.wait(timeout=5)
    # The worker let go of the step (acked) without handing off step 1.
    await eventually(lambda: _consumer_idle(raw, store.names, "slow"), timeout=3)
    assert read_executions(executions)[(handle.task_id, 1)] == 0


async def test_cancel_of_a_finished_task_is_a_conflict(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "fast", "input": 1}])
    await handle.wait(timeout=10)

    with pytest.raises(TaskConflictError, match="already completed"):
        await handle.cancel()


async def test_waiting_for_input_then_resume_with_the_answer(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "asks", "input": "draft"}, {"tool": "fast"}])
    record = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=10)
    assert record.input_request is not None and record.input_request.prompt == "Approve the draft?"
    with pytest.raises(InvalidTaskError, match=r"\$\.approved: 'yes' is not of type 'boolean'"):
        await client.send_input(handle.task_id, {"approved": "yes"})
    with pytest.raises(InvalidTaskError, match="'approved' is a required property"):
        await client.send_input(handle.task_id, {"ok": True})
    assert (await client.get(handle.task_id)).status is TaskStatus.WAITING  # still asking

    await client.send_input(handle.task_id, {"approved": True})

    result = await handle.wait(timeout=10)
    assert result == {"step": 1, "payload": {"approved": True}}
    counts = read_executions(executions)
    assert counts[(handle.task_id, 0)] == 1  # the step that asked did not run again
    events = [e async for e in handle.events(timeout=5)]
    assert any(isinstance(e, Waiting) and e.input_request is not None for e in events)
    with pytest.raises(TaskConflictError, match="not waiting"):
        await client.send_input(handle.task_id, {"approved": False})


async def test_a_tool_extends_the_plan(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    handle = await client.submit(
        [{"tool": "plans", "input": {}}, {"tool": "fast", "input": "final"}]
    )

    result = await handle.wait(timeout=10)

    plan = await handle.plan()
    assert [s.tool for s in plan] == ["plans", "fast", "fast", "summarize", "fast"]
    record = await handle.get()
    assert (record.done_steps, [s.tool for s in record.steps]) == (4, ["fast"])  # bounded
    assert result == {"step": 4, "payload": "final"}
    counts = read_executions(executions)
    assert [counts[(handle.task_id, i)] for i in range(5)] == [1, 1, 1, 1, 1]


@pytest.mark.parametrize(("tool", "attempts"), [("emails", 2), ("notifies", 3)])
async def test_once_prevents_a_repeated_side_effect_across_a_retry(
    tool: str,
    attempts: int,
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    """An async side effect (`emails`) and a plain function (`notifies`) alike."""
    await make_worker(app)
    handle = await client.submit([{"tool": tool, "input": {}}])

    result = await handle.wait(timeout=10)

    assert result == {"receipt": "sent-1"}
    lines = executions.read_text().splitlines()
    sends = [line for line in lines if line.endswith(" send")]
    runs = [line for line in lines if not line.endswith(" send")]
    assert len(runs) == attempts and len(sends) == 1


async def _status(store: Store, task_id: str, status: TaskStatus) -> None:
    found = await store.records.get(task_id)
    assert found is not None and found.record.status is status


async def _executed(executions: Path, task_id: str, step: int) -> None:
    assert read_executions(executions)[(task_id, step)] >= 1


async def _consumer_idle(raw: Raw, names: Names, tool: str) -> None:
    info = await raw.js.consumer_info(names.work_stream, names.tool_consumer(tool))
    assert info.num_ack_pending == 0 and info.num_pending == 0


patient = App("patient")
patient_log: list[str] = []


@patient.tool(heartbeat=600)
async def waits_long(ctx: StepContext, data: Any) -> Any:
    """Its heartbeat is too slow to notice a cancel: only the notice can stop it."""
    patient_log.append("started")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        patient_log.append("stopped")
        raise


async def test_a_cancel_notice_stops_a_running_step_at_once(
    config: NatsConfig, client: Client, dispatcher: object
) -> None:
    patient_log.clear()
    async with Worker(patient, config):
        handle = await client.submit([{"tool": "waits_long", "input": 1}], task_id="noticed")
        await wait_until(lambda: "started" in patient_log, message="the step to start")

        await handle.cancel()

        await wait_until(lambda: "stopped" in patient_log, message="the step to be stopped")
    with pytest.raises(TaskCancelledError):
        await handle.wait(timeout=5)
    assert patient_log == ["started", "stopped"]
