"""A tool that raises leaves its traceback where a user looks: the task's error, its
events and dead letter, `tether status` and `tether dlq show`, the dashboard, and the
worker's log (WARNING for each attempt retried, ERROR when it gives up)."""

from __future__ import annotations

import html
import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.apps.agents import app as agents
from tests.apps.tools import app as tools
from tests.e2e.test_cli_ops import tether
from tether import Agent, App, Client, NatsConfig, TaskFailedError, Worker
from tether.schemas import Failed, StepRetrying
from tether.testing import eventually
from tether.ui import Dashboard

WHERE = 'tools.py", line'
RAISED = "ValueError: the service is down"


@pytest.fixture
async def failed(
    config: NatsConfig, client: Client, dispatcher: object, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[str]:
    """A task whose `broken` step failed all 3 of its attempts."""
    caplog.set_level(logging.WARNING, logger="tether.worker")
    async with Worker(tools, config):
        handle = await client.submit([{"tool": "broken", "input": {}}])
        with pytest.raises(TaskFailedError):
            await handle.wait(timeout=30)
    yield handle.task_id


async def test_the_error_keeps_the_tools_traceback_everywhere_it_is_stored(
    client: Client, failed: str, caplog: pytest.LogCaptureFixture
) -> None:
    record = await client.get(failed)
    assert record.error is not None and record.error.type == "ValueError"
    traceback = record.error.traceback or ""
    assert WHERE in traceback and "in broken" in traceback and traceback.endswith(RAISED)
    assert len(traceback) <= 4200

    events = [e async for e in client.handle(failed).events()]
    retried = [e for e in events if isinstance(e, StepRetrying)]
    assert len(retried) == 2 and all(e.error and e.error.traceback for e in retried)
    assert any(isinstance(e, Failed) and e.error and e.error.traceback for e in events)
    (letter,) = [d for d in await client.dead_letters() if d.task_id == failed]
    assert letter.error.traceback and "in broken" in letter.error.traceback

    logged = [r for r in caplog.get_records("setup") if failed in r.getMessage()]
    assert [r.levelno for r in logged] == [logging.WARNING, logging.WARNING, logging.ERROR]
    assert all("in broken" in r.getMessage() and RAISED in r.getMessage() for r in logged)


async def test_status_and_dlq_show_print_it_and_dlq_ls_says_where(
    config: NatsConfig, failed: str
) -> None:
    status = await tether(config, "status", failed)
    shown = await tether(config, "dlq", "show", failed)
    listed = await tether(config, "dlq", "ls")

    assert status.code == 1, "a failed task's status exits 1"
    assert "traceback" in status.out and "in broken" in status.out
    assert shown.code == 0 and "in broken" in shown.out and RAISED in shown.out
    assert listed.code == 0 and "tools.py:" in listed.out and "in broken" in listed.out


async def test_the_dashboard_shows_it_on_the_task_page(config: NatsConfig, failed: str) -> None:
    async with Dashboard(config, port=0) as ui:
        base = ui.url.rstrip("/")
        async with httpx.AsyncClient(base_url=base) as http:
            page = html.unescape((await http.get(f"/tasks/{failed}")).text)
    assert 'class="traceback"' in page and "in broken" in page and RAISED in page


async def test_a_step_being_retried_shows_its_last_error_and_when_the_next_attempt_is_due(
    config: NatsConfig, client: Client, dispatcher: object
) -> None:
    """An unreachable model: the error names the URL and where it was set, and `tether
    status` shows it, with the next attempt's time, while the step waits to run again."""
    async with Worker(agents, config):
        handle = await client.submit_agent("unreachable", "anyone there?")
        retrying = await eventually(lambda: _retrying(client, handle.task_id), timeout=20)
        status = await tether(config, "status", handle.task_id)
        await handle.cancel()

    assert retrying.error is not None
    assert "http://127.0.0.1:9/v1" in retrying.error.message
    assert "OpenAIModel(base_url=...)" in retrying.error.message
    assert status.code == 0 and "retrying" in status.out
    assert "attempt 1 failed" in status.out and "127.0.0.1:9" in status.out
    assert "the next is due at" in status.out


async def _retrying(client: Client, task_id: str) -> StepRetrying:
    last = await client.last_event(task_id)
    assert isinstance(last, StepRetrying)
    return last


async def test_an_agent_listing_a_tool_no_worker_registered_is_warned_about_at_start(
    config: NatsConfig, caplog: pytest.LogCaptureFixture
) -> None:
    app = App("typo")
    app.add(Agent("typist", model="scripted", tools=["web_serach"]))
    caplog.set_level(logging.WARNING, logger="tether.worker")
    async with Worker(app, config):
        pass
    warned = [r.getMessage() for r in caplog.records if "web_serach" in r.getMessage()]
    assert len(warned) == 1 and "agent 'typist' lists tool 'web_serach'" in warned[0]
