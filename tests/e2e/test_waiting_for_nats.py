"""`tether worker` and `tether dispatcher` started while NATS is away wait for it (issue
37): they say so, try again with backoff, serve once it answers, and exit at once on
SIGTERM; a refusal still fails at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.apps.tools import app
from tests.chaos_runs.servers import Cluster
from tests.conftest import APP, ROOT, raw_connection, start_worker, stop_worker
from tests.servers import configured_server, free_port
from tether import Client, Dispatcher, NatsConfig, TaskStatus, Worker
from tether.nats.server import NatsServer
from tether.schemas.names import Names
from tether.testing import wait_until

WAITING = "waiting for NATS at"
ANSWERED = "answered at try"


def start_dispatcher(config: NatsConfig, log: Path) -> subprocess.Popen[bytes]:
    """`tether dispatcher` (with its API) as a real child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "tether.cli", "dispatcher"]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*command, "--nats", config.url, "--prefix", config.names.prefix],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )


@contextmanager
def running(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield process
    finally:
        if process.poll() is None:
            stop_worker(process)


def config_at(url: str) -> NatsConfig:
    return NatsConfig(url=url, names=Names(prefix=f"t{uuid.uuid4().hex[:10]}"))


async def says(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until the process's log holds `text`; fail at once should it exit first."""

    def said() -> bool:
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
        return text in log.read_text()

    await wait_until(said, timeout=timeout, message=f"{text!r} in {log.name}")


async def stays_up(process: subprocess.Popen[bytes], log: Path, seconds: float) -> None:
    """The process is still running after `seconds` (several more tries, at the backoff's
    start): a start that fails exits within one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
        await asyncio.sleep(0.1)


async def submit_raw(url: str, prefix: str, task_id: str) -> None:
    """A TaskSubmit published on `<prefix>.submit.<task_id>` by plain nats-py: only a dispatcher
    records it."""
    async with raw_connection(url) as raw:
        body = json.dumps({"task_id": task_id, "steps": [{"tool": "fast", "input": 1}]})
        headers = {"Nats-Msg-Id": task_id}
        await raw.js.publish(f"{prefix}.submit.{task_id}", body.encode(), headers=headers)


async def test_a_worker_started_before_nats_waits_for_it_then_serves(tmp_path: Path) -> None:
    port = free_port()
    config = config_at(f"nats://127.0.0.1:{port}")
    log = tmp_path / "worker.log"
    with running(start_worker(config, APP, log=log)) as worker:
        await says(log, f"{WAITING} {config.url}", worker, timeout=10)
        assert "--nats / TETHER_NATS_URL" in log.read_text()  # what to do about it
        await stays_up(worker, log, seconds=2.0)

        with NatsServer(tmp_path / "nats", port=port):
            await says(log, ANSWERED, worker, timeout=15)
            async with Client(config) as client, Dispatcher(config):
                handle = await client.submit([{"tool": "fast", "input": 1}])
                result = await handle.wait(timeout=15)
            assert result == {"step": 0, "payload": 1}
            stop_worker(worker)
    assert worker.returncode == 0, log.read_text()
    assert "Traceback" not in log.read_text()


async def test_a_dispatcher_started_before_nats_waits_for_it_then_accepts(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = config_at(f"nats://127.0.0.1:{port}")
    log = tmp_path / "dispatcher.log"
    with running(start_dispatcher(config, log)) as dispatcher:
        await says(log, f"{WAITING} {config.url}", dispatcher, timeout=10)
        await stays_up(dispatcher, log, seconds=2.0)

        with NatsServer(tmp_path / "nats", port=port):
            await says(log, ANSWERED, dispatcher, timeout=15)
            async with Client(config) as client, Worker(app, config):
                task_id = f"raw-{uuid.uuid4().hex}"
                await submit_raw(config.url, config.names.prefix, task_id)
                assert await client.handle(task_id).wait(timeout=15) == {"step": 0, "payload": 1}
            stop_worker(dispatcher)
    assert dispatcher.returncode == 0, log.read_text()
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("role", ["worker", "dispatcher"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_while_waiting_exits_at_once_without_a_traceback(
    role: str, sig: signal.Signals, tmp_path: Path
) -> None:
    config = config_at(f"nats://127.0.0.1:{free_port()}")
    log = tmp_path / f"{role}.log"
    if role == "worker":
        process = start_worker(config, APP, log=log)
    else:
        process = start_dispatcher(config, log)
    with running(process):
        await says(log, WAITING, process, timeout=10)
        process.send_signal(sig)
        signalled = time.monotonic()
        await wait_until(lambda: process.poll() is not None, timeout=10, message="an exit")
        took = time.monotonic() - signalled
    assert process.returncode == 0, log.read_text()
    # well within a try's 10 s connect bound; it takes 0.3 s, most of it Python's exit
    assert took < 5.0, f"the {role} took {took:.1f}s to exit"
    assert "Traceback" not in log.read_text()


async def test_a_worker_refused_by_nats_still_exits_at_once(tmp_path: Path) -> None:
    """Refused credentials are no outage: waiting would only hide them."""
    users = "authorization { user: alice, password: s3cret }"
    with configured_server(tmp_path, users) as server:
        log = tmp_path / "worker.log"
        worker = start_worker(config_at(f"nats://{server.address}"), APP, log=log)
        with running(worker):
            await wait_until(lambda: worker.poll() is not None, timeout=15, message="an exit")
    assert worker.returncode == 2, log.read_text()
    assert "refused the credentials" in log.read_text()
    assert WAITING not in log.read_text()


async def test_roles_started_on_a_cluster_with_no_leader_yet_wait_then_serve(
    tmp_path: Path,
) -> None:
    """One node of three up: connecting works, but JetStream does not answer until the
    cluster elects a leader (the chaos runs' `NATS did not answer`)."""
    cluster = Cluster.from_deploy(tmp_path / "cluster")
    first, *others = cluster.nodes
    first.start()
    try:
        await wait_until(lambda: first.running and _listens(first.client_port), timeout=10)
        config = config_at(cluster.url)
        logs = {role: tmp_path / f"{role}.log" for role in ("worker", "dispatcher")}
        worker = start_worker(config, APP, log=logs["worker"])
        dispatcher = start_dispatcher(config, logs["dispatcher"])
        with running(worker), running(dispatcher):
            for process, log in ((worker, logs["worker"]), (dispatcher, logs["dispatcher"])):
                await says(log, "NATS did not answer", process, timeout=20)
            for node in others:
                node.start()
            for process, log in ((worker, logs["worker"]), (dispatcher, logs["dispatcher"])):
                await says(log, ANSWERED, process, timeout=30)
            task_id = f"raw-{uuid.uuid4().hex}"
            await submit_raw(first.url, config.names.prefix, task_id)
            async with Client(config) as client:
                record = await client.handle(task_id).wait_for(
                    lambda r: r.status is TaskStatus.COMPLETED, timeout=15
                )
            assert record.result == {"step": 0, "payload": 1}
    finally:
        cluster.stop()


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
