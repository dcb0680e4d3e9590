"""Two copies of one step's message in one worker (a failover's redelivery, or two
survivors handing a held step on, with JetStream's duplicate window lost to a restart):
the second is handled once the first is done, so it finds the step's checkpoint and
does not run the finished step again."""

from __future__ import annotations

from pathlib import Path

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker
from tether import Client
from tether.nats.store import Store
from tether.schemas.work import WorkMessage
from tether.testing import eventually


async def test_a_second_copy_of_a_running_step_waits_for_the_first_and_runs_nothing_again(
    client: Client,
    store: Store,
    make_worker: MakeWorker,
    dispatcher: object,
    executions: Path,
) -> None:
    await make_worker(app)
    step = {"tool": "slow", "input": {"sleep": 1.0}}
    handle = await client.submit([step, {"tool": "fast"}])

    async def running() -> None:
        assert read_executions(executions)[(handle.task_id, 0)] == 1

    await eventually(running)
    copy = WorkMessage(task_id=handle.task_id, step=0, tool="slow", input=step["input"])
    await store.publish_work(copy, store.names.step_msg_id(handle.task_id, 0) + ".copy")

    assert (await handle.wait(timeout=20))["step"] == 1
    await eventually(lambda: _copy_settled(store))
    counts = read_executions(executions)
    assert (counts[(handle.task_id, 0)], counts[(handle.task_id, 1)]) == (1, 1)


async def _copy_settled(store: Store) -> None:
    """Nothing left on the tool's subject: the copy was handled (and found the step done)."""
    backlog = await store.tools.backlog("slow")
    assert backlog is not None and backlog[:2] == (0, 0), backlog
