"""A `tether worker` process and a `tether gateway` process in front of it, for the tests
that drive an app's agents from MCP clients (one stack a module)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import start_worker, stop_worker
from tests.e2e.test_gateway import _start_gateway
from tether import Client, NatsConfig
from tether.testing import wait_until


@contextlib.asynccontextmanager
async def serving(
    config: NatsConfig, apps: Sequence[str], tools: Sequence[str], logs: Path
) -> AsyncIterator[str]:
    """The gateway's MCP URL, once the worker (serving `apps`, its tools recording to
    `executions(logs)`) has registered `tools`. The gateway stops first, and must exit 0."""
    executions(logs).touch()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TETHER_TEST_EXECUTIONS", str(executions(logs)))
        worker = start_worker(config, *apps, log=logs / "worker.log")
    try:
        process, log, url = _start_gateway(config, logs / "gateway.log")
        try:
            await wait_until(
                lambda: "MCP gateway serving" in log.read_text() or process.poll() is not None,
                timeout=30,
                message="the gateway to start",
            )
            assert process.poll() is None, log.read_text()
            await wait_until(lambda: _registered(config, tools), timeout=30, message="the worker")
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0, log.read_text()
    finally:
        stop_worker(worker)


def executions(logs: Path) -> Path:
    """Where the tools of a stack whose logs are in `logs` record their runs."""
    return logs / "executions.log"


async def _registered(config: NatsConfig, tools: Sequence[str]) -> bool:
    async with Client(config) as client:
        store = client._store
        assert store is not None
        return None not in [await store.tools.get(name) for name in tools]
