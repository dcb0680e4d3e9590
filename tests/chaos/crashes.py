"""A worker that kills itself at one point of the protocol, and the worker that survives it."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import APP, start_worker
from tether import Client, Dispatcher, NatsConfig, NatsServer, TaskHandle, Worker
from tether.schemas import Names
from tether.testing import wait_until


async def crash(
    config: NatsConfig,
    crash_at: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app: str = APP,
) -> None:
    """Run a worker that SIGKILLs itself at `crash_at` (see tests/apps/crashing_worker.py)
    and return once it has."""
    monkeypatch.setenv("TETHER_CRASH_AT", crash_at)
    doomed_log = tmp_path / "doomed.log"
    doomed = start_worker(
        config, app, log=doomed_log, entry=[sys.executable, "-m", "tests.apps.crashing_worker"]
    )
    await wait_until(
        lambda: doomed.poll() is not None, timeout=20, message="the worker to kill itself"
    )
    assert doomed.returncode == -9, doomed_log.read_text()
    monkeypatch.delenv("TETHER_CRASH_AT")


async def survive(config: NatsConfig, handle: TaskHandle, app: str = APP) -> Any:
    """A fresh worker; the task's result once it has finished the task. It runs in this
    process (the crash was a real process's): a new process would only add its start."""
    module, _, attribute = app.partition(":")
    async with Worker(getattr(importlib.import_module(module), attribute), config):
        return await handle.wait(timeout=30)


@contextlib.asynccontextmanager
async def restartable(
    tmp_path: Path, prefix: str
) -> AsyncIterator[tuple[NatsServer, NatsConfig, Client]]:
    """A nats-server of the test's own (to kill and start again), with a client and a
    dispatcher on it; the server stops on the way out."""
    server = NatsServer(tmp_path / "nats").start()
    config = NatsConfig(url=server.url, names=Names(prefix=prefix))
    try:
        async with Client(config) as client, Dispatcher(config):
            yield server, config, client
    finally:
        server.stop()
