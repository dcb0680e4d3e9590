"""A step's message that comes back while the worker running it is alive (its ack wait
ran out while it was busy, or NATS was away for a moment): the other worker that gets it
leaves the step to its holder, which finishes it, and nothing runs twice. Seen in the
streaming load test and the cluster chaos run, where the copy counted the live holder
as dead and ran a finished step again."""

from __future__ import annotations

from pathlib import Path

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker, Raw
from tether import Client
from tether.nats import headers
from tether.nats.store import Store
from tether.schemas.codec import encode
from tether.schemas.work import WorkMessage
from tether.testing import eventually


async def test_a_copy_that_comes_back_while_its_holder_is_alive_runs_nothing_again(
    client: Client,
    store: Store,
    raw: Raw,
    make_worker: MakeWorker,
    dispatcher: object,
    executions: Path,
) -> None:
    holder = await make_worker(app, concurrency=1)
    step = {"tool": "slow", "input": {"sleep": 3.0}}
    handle = await client.submit([step, {"tool": "fast"}])

    async def marked() -> None:  # running, its first beat written: held and marked
        run, _ = await store.heartbeats.run_of(handle.task_id, 0, None)
        assert run is not None and run.running and run.holder == holder.worker_id

    await eventually(marked)
    other = await make_worker(app, concurrency=1)  # idle: the copy goes to it
    copy = WorkMessage(task_id=handle.task_id, step=0, tool="slow", input=step["input"])
    sent = {headers.PRIOR_ATTEMPTS: "1", headers.MSG_ID: f"{handle.task_id}-copy"}
    await raw.js.publish(store.names.work_subject("slow"), encode(copy), headers=sent)

    assert (await handle.wait(timeout=30))["step"] == 1
    await eventually(lambda: _settled(store), timeout=30)
    counts = read_executions(executions)
    assert (counts[(handle.task_id, 0)], counts[(handle.task_id, 1)]) == (1, 1)
    assert other.worker_id != holder.worker_id


async def _settled(store: Store) -> None:
    """Nothing left on the tool's subject: the copy was handled (and found the step done)."""
    backlog = await store.tools.backlog("slow")
    assert backlog is not None and backlog[:2] == (0, 0), backlog
