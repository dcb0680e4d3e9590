"""A live worker whose connection is gone for a while is not taken for dead (issue 51,
item 2). On the 3-node cluster of deploy/, the server a worker is connected to is
SIGKILLed while the worker is too slow to connect again at once (SIGSTOPped for a
second, as a worker starved of CPU): meanwhile its subscription is gone and the others
hear "no responders" for it (the cluster chaos run saw checkpointed steps run again).
Their own servers told them the cluster changed (an INFO as the route dropped), so
"no responders" is not believed for a while, and the worker, back, keeps its step."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from tests.apps.tools import read_executions
from tests.chaos.test_dead_known_at_once import judging
from tests.chaos.test_held_steps import held_entries
from tests.chaos_runs.installation import provisioned
from tests.chaos_runs.servers import Cluster, Node
from tests.chaos_runs.streams import leaders
from tests.conftest import APP, start_worker, stop_worker
from tether import Client, Dispatcher, NatsConfig, Worker
from tether.nats.layout import expected_streams
from tether.nats.store import Store
from tether.schemas.names import Names
from tether.testing import eventually, wait_until
from tether.worker import Liveness

pytestmark = pytest.mark.slow
DEAD_AFTER = 30.0
"""So long that a step run again can only have been handed on by "no responders"."""
STEADY_S = 2.5
"""Past the 2 s a survivor's connection must be steady before it believes "no responders"."""
STOPPED_S = 1.0
"""How long the worker cannot connect again: longer than a late beat's questions take
(0.6 s late, then 0.1 s apart), less than a survivor's 2 s of settling after it heard
that the cluster changed."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster.from_deploy(tmp_path / "cluster")
    started.start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def ready(cluster: Cluster) -> AsyncIterator[NatsConfig]:
    """The cluster healthy and provisioned at R3, its installation's prefix fresh."""
    await cluster.wait_healthy()
    config = NatsConfig(url=cluster.url, replicas=3, names=Names(prefix="bounced"))
    await provisioned(config)
    yield config


async def test_a_worker_whose_server_restarts_keeps_its_held_step(
    cluster: Cluster,
    ready: NatsConfig,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bounced, *others = cluster.nodes
    await _lead_nothing(bounced, others[0], ready)
    on_others = NatsConfig(url=others[0].url, names=ready.names)
    monkeypatch.setenv("TETHER_DEAD_AFTER", str(DEAD_AFTER))
    worker = start_worker(
        NatsConfig(url=bounced.url, names=ready.names), APP, log=tmp_path / "worker.log"
    )
    judge = Worker(judging, on_others, worker_id="judge", liveness=Liveness(dead_after=DEAD_AFTER))
    try:
        async with Dispatcher(on_others), Client(on_others) as client, judge:
            store = client._store
            handle = await client.submit([{"tool": "slow", "input": {"sleep": 6.0}}])
            key = await _held_by(store, worker, handle.task_id)
            await asyncio.sleep(STEADY_S)  # the judge believes "no responders" from now on
            worker.send_signal(signal.SIGSTOP)
            bounced.kill()
            await asyncio.sleep(STOPPED_S)
            worker.send_signal(signal.SIGCONT)  # it connects to another server
            bounced.start()
            await cluster.wait_healthy([bounced])
            result = await handle.wait(timeout=60)
            beat = await store.workers.beat_of(key)
    finally:
        worker.send_signal(signal.SIGCONT)
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    judged = [r.getMessage() for r in caplog.records if r.name == "tether.worker"]
    assert not [m for m in judged if "is gone" in m], judged  # the judge claimed it
    assert result == {"step": 0, "slept": 6.0}
    assert list(read_executions(executions).values()) == [1], log
    assert "taken for dead" not in log
    assert beat is None or beat.claimed_by is None


async def _held_by(store: Store, worker: subprocess.Popen[bytes], task_id: str) -> str:
    """The key of the worker that holds the task's step, once it does."""

    async def held() -> str:
        entries = await held_entries(store)
        assert len(entries) == 1 and f"-{worker.pid}-" in entries[0], entries
        assert entries[0].endswith(f".{task_id}.0"), entries
        return entries[0].split(".", 1)[0]

    return await eventually(held, timeout=60)


async def _lead_nothing(node: Node, other: Node, config: NatsConfig) -> None:
    """Move every stream's leader off `node`: its death then fails no survivor's beat
    (a survivor that cannot store its own beat judges no one), only its clients."""
    nc = await nats.connect(other.url)
    try:
        js = nc.jetstream()
        streams = expected_streams(config.names)

        async def elsewhere() -> bool:
            led = await leaders(js, streams)
            on_node = [stream for stream, leader in led.items() if leader in ("", node.name)]
            for stream in on_node:
                await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
            return not on_node

        await wait_until(elsewhere, 60, 1.0, f"no stream led by {node.name}")
    finally:
        await nc.close()
