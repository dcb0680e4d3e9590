"""Errors said once (issue 50, items 6 and 8): a model URL with nothing listening is told
at the step's first failure, in one worker line; its retries go on quietly, counted;
its end says what happened and how to run the task on, not an internal class name; and
an error that explains itself shows no frames of Tether's own under `tether status` or
on the dashboard (`tether status --verbose` has them)."""

from __future__ import annotations

import html
import logging

import httpx
import pytest

from tests.apps.agents import app as agents
from tests.conftest import MakeWorker
from tests.e2e.test_cli_ops import tether
from tether import Client, NatsConfig, TaskFailedError
from tether.schemas import StepRetrying
from tether.ui import Dashboard

URL = "http://127.0.0.1:9/v1"


@pytest.fixture
async def refused(
    client: Client, dispatcher: object, make_worker: MakeWorker, caplog: pytest.LogCaptureFixture
) -> str:
    """A task whose model refused every one of its 4 attempts."""
    caplog.set_level(logging.DEBUG, logger="tether.worker")
    await make_worker(agents)
    handle = await client.submit_agent("refused", "anyone there?")
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    return failed.value.task_id


async def test_a_refused_model_is_said_once_then_retried_quietly(
    client: Client, refused: str, caplog: pytest.LogCaptureFixture
) -> None:
    logged = [r for r in caplog.get_records("setup") if refused in r.getMessage()]
    warned = [r.getMessage() for r in logged if r.levelno == logging.WARNING]
    quiet = [r.getMessage() for r in logged if r.levelno == logging.DEBUG]
    assert len(warned) == 1 and f"could not connect to {URL}" in warned[0], warned
    assert "attempt 1:" in warned[0]
    assert len(quiet) == 2 and all("retrying in" in line for line in quiet)  # counted
    assert not [m for r in logged if "Traceback" in (m := r.getMessage())]

    events = [e async for e in client.handle(refused).events()]
    first = next(e for e in events if isinstance(e, StepRetrying))
    assert first.attempt == 1 and first.error is not None  # the status shows it at once
    assert f"could not connect to {URL}" in first.error.message


async def test_its_end_says_what_happened_and_how_to_run_it_on(
    client: Client, refused: str
) -> None:
    error = (await client.get(refused)).error
    assert error is not None and error.type == "ModelUnreachable"
    assert "RetryableError" not in error.message and "gave up after" not in error.message
    assert error.message.startswith(f"could not connect to {URL}: ")
    assert "is the server up? (4 attempts)" in error.message
    assert f"'tether dlq retry {refused}'" in error.message and "dashboard" in error.message


async def test_status_shows_its_frames_only_when_verbose(config: NatsConfig, refused: str) -> None:
    plain = await tether(config, "status", refused)
    verbose = await tether(config, "status", refused, "--verbose")

    assert plain.code == 1 and f"could not connect to {URL}" in plain.out
    assert "traceback" not in plain.out and "models.py" not in plain.out
    assert verbose.code == 1 and "traceback" in verbose.out and "models.py" in verbose.out


async def test_the_dashboard_shows_no_frames_of_tethers_own(
    config: NatsConfig, refused: str
) -> None:
    async with Dashboard(config, port=0) as ui:
        async with httpx.AsyncClient(base_url=ui.url.rstrip("/")) as http:
            page = html.unescape((await http.get(f"/tasks/{refused}")).text)
    assert f"could not connect to {URL}" in page
    assert 'class="traceback"' not in page and "models.py" not in page
