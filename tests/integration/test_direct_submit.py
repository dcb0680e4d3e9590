"""Submitting without the dispatcher's hop (issue 26): `Client.submit` records the task and
hands off its first step itself; a submitter that stopped half-way finishes by submitting
again, and a different task under a taken id is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.tools import app, read_executions
from tether import Client, NatsConfig, TaskExistsError, Worker
from tether.clock import utcnow
from tether.nats.store import Store
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.schemas.records import TaskStatus
from tether.tasks import rules

PLAN = [{"tool": "fast", "input": {"n": 1}}]


async def test_a_task_runs_with_no_dispatcher(
    config: NatsConfig, client: Client, executions: Path
) -> None:
    async with Worker(app, config):
        handle = await client.submit(PLAN)
        record = await client.get(handle.task_id)  # recorded before submit returned
        assert record.submit_seq == 0
        assert (await handle.wait(timeout=20))["payload"] == {"n": 1}
    events = [event.kind for event in await client.history(handle.task_id)]
    assert events[0] == "submitted" and events[-1] == "completed"
    assert read_executions(executions)[(handle.task_id, 0)] == 1


async def test_submitting_again_finishes_a_hand_off_its_submitter_never_made(
    config: NatsConfig, client: Client, store: Store, executions: Path
) -> None:
    """The record is there, the first step never went out (the submitter stopped in
    between): the same submission again is a duplicate, as through the dispatcher, but
    hands the task off first, and the step runs once."""
    steps = [StepSpec(tool="fast", input={"n": 2})]
    stopped = rules.new_record(TaskSubmit(task_id="half-way", steps=steps), utcnow())
    assert await store.records.create(stopped) is not None
    async with Worker(app, config):
        with pytest.raises(TaskExistsError, match="task 'half-way' already exists"):
            await client.submit(steps, task_id="half-way")
        handle = client.handle("half-way")
        assert (await handle.wait(timeout=20))["payload"] == {"n": 2}
        with pytest.raises(TaskExistsError, match="task 'half-way' already exists"):
            await client.submit(steps, task_id="half-way")  # it ran: nothing to hand off
    assert read_executions(executions)[("half-way", 0)] == 1


async def test_another_plan_under_a_taken_id_is_refused_and_changes_nothing(
    client: Client,
) -> None:
    first = await client.submit(PLAN, task_id="taken")
    before = await first.get()
    with pytest.raises(TaskExistsError, match="task 'taken' already exists"):
        await client.submit([{"tool": "fast", "input": {"n": 9}}], task_id="taken")
    after = await first.get()
    assert after == before and after.status is TaskStatus.PENDING
