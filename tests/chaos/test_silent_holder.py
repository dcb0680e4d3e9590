"""The only worker killed mid-step: every door (status, watch, the MCP status message,
the dashboard) says its worker fell silent and that no worker serving the tool is
running, instead of showing an old heartbeat as running."""

from __future__ import annotations

import asyncio
import html
import signal
from pathlib import Path

import httpx
import pytest

from tests.conftest import APP, start_worker
from tests.e2e.test_cli_ops import finish, spawn, tether
from tether import Client, NatsConfig, TaskStatus
from tether.gateway.tasks import Whereabouts, status_message
from tether.testing import eventually
from tether.ui import Dashboard

pytestmark = pytest.mark.slow

SILENT = "has been silent"
NONE_RUNNING = "step 0 runs again when a worker serving 'slow' starts — none is running"


async def test_status_and_watch_say_the_killed_worker_is_silent_and_none_serves_the_tool(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")  # watch's lines reach the pipe as printed
    worker = start_worker(config, APP, log=tmp_path / "worker.log")
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 120}}], task_id="held")
    await handle.wait_for(lambda r: r.status is TaskStatus.RUNNING, timeout=20)

    async def beating() -> None:
        assert await client.heartbeat("held") is not None

    await eventually(beating, timeout=10)
    watching = await spawn(config, "watch", "held")
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    killed_at = asyncio.get_running_loop().time()

    async def status_says_it() -> None:
        shown = await tether(config, "status", "held")
        assert SILENT in shown.out and NONE_RUNNING in shown.out, shown.out

    await eventually(status_says_it, timeout=15, interval=0.3)
    assert asyncio.get_running_loop().time() - killed_at < 10

    record = await client.get("held")
    stall = await client.stall(record)
    assert stall is not None and stall.kind == "holder"
    where = Whereabouts(await client.heartbeat("held"), stall)
    assert NONE_RUNNING in status_message(record, where)  # the MCP status message
    async with Dashboard(config, port=0) as ui, httpx.AsyncClient(base_url=ui.url) as http:
        page = html.unescape((await http.get("/tasks/held")).text)
    assert 'id="task-stall"' in page and NONE_RUNNING in page

    async def watch_says_it() -> str:
        assert watching.stdout is not None
        while line := (await watching.stdout.readline()).decode():
            if SILENT in line:
                return line
        raise AssertionError("tether watch ended before it said the worker is silent")

    line = await asyncio.wait_for(watch_says_it(), 30)
    watching.terminate()
    await finish(watching)
    assert "worker " in line and NONE_RUNNING in line, line
