"""A task page as a reader meets it, in a real headless Chromium: the question on top,
an answer streaming above its folded retry errors, and a killed worker said to be silent
on a page that was already open."""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.agents import app as agents
from tests.conftest import APP, MakeWorker, start_worker
from tests.e2e.browser import Browser, headless_chromium
from tether import Client, NatsConfig, TaskStatus
from tether.testing import eventually
from tether.testing.llm import ScriptedModel
from tether.ui import Dashboard

NONE_RUNNING = "step 0 runs again when a worker serving 'slow' starts — none is running"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with headless_chromium() as chromium:
        yield chromium


async def test_an_agents_question_is_on_top_and_its_answer_streams_above_folded_retries(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    browser: Browser,
) -> None:
    await make_worker(agents)
    question = f"Why are durable agents worth it? {uuid.uuid4().hex[:8]}"
    answer = "Because a crash costs at most the step that was running, never the whole task."
    down = {"status": 503, "message": "the model is down for maintenance"}
    turn = {"content": answer, "faults": [down, down, down]}
    model.load({"conversations": [{"match": question, "turns": [turn]}], "chunk_delay": 0.15})
    handle = await client.submit_agent("researcher", question)

    async with Dashboard(config, port=0) as ui:
        await browser.open(f"{ui.url.rstrip('/')}/tasks/{handle.task_id}")
        await browser.has_text("#question", question)
        await browser.has_text('pre[data-tokens="0:"]', "Because a crash", timeout=30)
        await browser.has_text("#status", "completed")
        assert await handle.wait(timeout=20) == answer

        step = '[data-step="0"]'
        folds = await browser.count(f"{step} .attempts li[data-folded]")
        assert folds == 1, await browser.text(step)
        assert "attempts 1–3 failed 3 times" in await browser.text(f"{step} li[data-folded]")
        assert (await browser.text(step)).count("down for maintenance") == 1
        tokens_first = await browser.run(
            f"const s = document.querySelector('{step}');"
            "const t = s.querySelector('pre.tokens'), a = s.querySelector('.attempts');"
            "return !!(t.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING);"
        )
        assert tokens_first, "the answer must come before the attempts' errors"
        usage = await browser.text("#usage")
        assert not re.search(r"\b1 calls\b", usage), usage
        assert re.search(r"\b(1 call|[02-9]\d* calls)\b", usage), usage


@pytest.mark.slow
async def test_an_open_page_says_when_the_running_steps_worker_falls_silent(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    browser: Browser,
    tmp_path: Path,
) -> None:
    worker = start_worker(config, APP, log=tmp_path / "worker.log")
    try:
        handle = await client.submit([{"tool": "slow", "input": {"sleep": 120}}])
        await handle.wait_for(lambda r: r.status is TaskStatus.RUNNING, timeout=20)

        async def beating() -> None:
            assert await client.heartbeat(handle.task_id) is not None

        await eventually(beating, timeout=10)
        async with Dashboard(config, port=0) as ui:
            await browser.open(f"{ui.url.rstrip('/')}/tasks/{handle.task_id}")
            await browser.run("window.__stayed = true")
            await browser.has_text("#heartbeat", "on worker")
            assert await browser.count("#task-stall") == 0

            worker.send_signal(signal.SIGKILL)
            worker.wait(10)

            await browser.has_text("#task-stall", NONE_RUNNING, timeout=15)
            assert "has been silent" in await browser.text("#task-stall")
            assert await browser.count("#heartbeat") == 0  # no old beat shown as running
            assert await browser.run("return window.__stayed === true")  # no reload
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
