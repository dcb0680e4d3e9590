"""Work that waits says so (issue 23, items 5 and 6): a task for a tool no running worker
serves, and a submission no dispatcher has recorded, each say what they wait for in
`tether status`, `--wait`, the dashboard and the MCP task's status message; a submit
warns; the gateway offers only tools a live worker serves."""

from __future__ import annotations

import asyncio
import html

import httpx
import pytest

from tests.apps.agents import app as agents
from tests.apps.tools import app as tools
from tests.e2e.test_cli_ops import finish, spawn, tether
from tether import Client, Dispatcher, NatsConfig, UnservedToolWarning, Worker
from tether.gateway import Gateway
from tether.mcp_tasks import get_task, start_task, tasks_client
from tether.testing import eventually
from tether.ui import Dashboard


async def test_a_task_for_a_tool_no_running_worker_serves_says_so_until_one_starts(
    config: NatsConfig, client: Client, dispatcher: Dispatcher, registered: None
) -> None:
    """`fast` was registered by a worker that has stopped: the task is kept, pending, and
    every place a user looks says which worker it waits for, since when."""
    with pytest.warns(UnservedToolWarning, match="no running worker serves 'fast'"):
        handle = await client.submit([{"tool": "fast", "input": {"x": 1}}])
    record = await eventually(lambda: client.get(handle.task_id))
    stall = await client.stall(record)
    assert stall is not None and stall.kind == "worker"
    assert "waiting for a worker serving 'fast' since" in stall.message
    assert "tether worker MODULE:APP" in stall.message

    status = await tether(config, "status", handle.task_id)
    assert status.code == 0 and "waiting for a worker serving 'fast'" in status.out
    async with Dashboard(config, port=0) as ui, httpx.AsyncClient(base_url=ui.url) as http:
        page = html.unescape((await http.get(f"/tasks/{handle.task_id}")).text)
    assert 'id="task-stall"' in page and "waiting for a worker serving 'fast'" in page

    async with Worker(tools, config):
        assert (await handle.wait(timeout=20))["payload"] == {"x": 1}
    assert await client.stall(await client.get(handle.task_id)) is None


async def test_submit_wait_says_what_it_waits_for_and_warns_on_stderr(
    config: NatsConfig, dispatcher: Dispatcher, registered: None
) -> None:
    process = await spawn(config, "submit", "fast={}", "--wait")
    assert process.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(20):
            while not any("waiting for a worker serving 'fast'" in line for line in lines):
                lines.append((await process.stdout.readline()).decode())
    finally:
        process.terminate()
    ended = await finish(process)
    assert "warning: task" in ended.err and "no running worker serves 'fast'" in ended.err
    assert "start one with 'tether worker MODULE:APP'" in lines[-1]


async def test_a_submission_no_dispatcher_recorded_is_submitted_not_unknown(
    config: NatsConfig, client: Client, registered: None
) -> None:
    # Through the queue, as a client that may not write records (or raw JSON) submits.
    async with Client(config, act_through_api=True) as queueing:
        await queueing.submit([{"tool": "fast", "input": {"y": 2}}], task_id="nodisp")
    handle = client.handle("nodisp")
    assert await client.find("nodisp") is None
    stall = await client.queued("nodisp")
    assert stall is not None and stall.kind == "dispatcher"
    assert "'nodisp' was submitted at" in stall.message
    assert "no dispatcher is running" in stall.message and "tether dispatcher" in stall.message
    assert not await client.dispatcher_running()

    status = await tether(config, "status", "nodisp")
    assert status.code == 0 and "submitted" in status.out
    assert "waits for a dispatcher" in status.out
    unknown = await tether(config, "status", "never-submitted")
    assert unknown.code == 4 and "not found" in unknown.err

    async with Dispatcher(config), Worker(tools, config):
        assert (await handle.wait(timeout=20))["payload"] == {"y": 2}
        assert await client.dispatcher_running()
        assert await client.queued("nodisp") is None


async def test_a_running_task_warns_when_no_dispatcher_is_up(
    config: NatsConfig, client: Client, registered: None
) -> None:
    """Sleeps, deadlines and input timeouts fire through a dispatcher: status says so."""
    async with Dispatcher(config):
        handle = await client.submit([{"tool": "fast", "input": {}}])
        await eventually(lambda: client.get(handle.task_id))
    status = await tether(config, "status", handle.task_id)
    assert "warning" in status.out and "no dispatcher is running" in status.out


async def test_the_gateway_offers_only_tools_a_live_worker_serves(
    config: NatsConfig, registered: None
) -> None:
    async with Gateway(config, port=0) as gateway:
        async with tasks_client(gateway.url) as mcp:
            stopped = {tool.name for tool in (await mcp.list_tools()).tools}
        async with Worker(tools, config), tasks_client(gateway.url) as mcp:

            async def offered() -> set[str]:
                names = {tool.name for tool in (await mcp.list_tools()).tools}
                assert "fast" in names
                return names

            await eventually(offered, timeout=10)
    assert "fast" not in stopped


async def test_the_mcp_status_message_says_what_a_task_waits_for(
    config: NatsConfig, client: Client, dispatcher: Dispatcher
) -> None:
    """A step being retried: its last error and when the next attempt is due (the
    dashboard too). Then the worker stops: which worker the task waits for."""
    async with Gateway(config, port=0) as gateway, tasks_client(gateway.url) as mcp:
        async with Worker(agents, config):
            created = await start_task(mcp, "unreachable", {"input": "anyone there?"})

            async def said(fragment: str) -> str:
                message = (await get_task(mcp, created.task_id))["statusMessage"]
                assert fragment in message
                return str(message)

            retrying = await eventually(lambda: said("attempt 1 failed"), timeout=20)
            async with Dashboard(config, port=0) as ui, httpx.AsyncClient(base_url=ui.url) as web:
                page = html.unescape((await web.get(f"/tasks/{created.task_id}")).text)
        waiting = await eventually(lambda: said("waiting for a worker serving"), timeout=20)
        await client.cancel(created.task_id)
    assert "127.0.0.1:9" in retrying and "the next is due at" in retrying
    assert 'id="task-name">unreachable<' in page  # the agent, whatever step it is on
    assert 'class="note-pending stall-retry"' in page and "attempt 1 failed" in page
    assert "'unreachable'" in waiting
