"""The dashboard in a real headless Chromium: the pages a person uses, live updates with
no reload, and the actions (answer an input request, retry a dead letter)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.agents import app as agents
from tests.apps.tools import app as tools
from tests.conftest import MakeWorker
from tests.e2e.browser import Browser, headless_chromium
from tether import Client, NatsConfig, Step
from tether.testing.llm import ScriptedModel
from tether.ui import Dashboard

SCREENSHOT = Path(__file__).parent / "screenshots" / "task-page.png"
"""The README's picture; `TETHER_UPDATE_SCREENSHOT=1` makes the test write a new one."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with headless_chromium() as chromium:
        yield chromium


@pytest.fixture
async def ui(config: NatsConfig, api: object) -> AsyncIterator[str]:
    """The dashboard, with the API its actions go through."""
    async with Dashboard(config, port=0) as dashboard:
        yield dashboard.url.rstrip("/")


async def _page_was_not_reloaded(browser: Browser) -> bool:
    return bool(await browser.run("return window.__stayed === true"))


async def test_the_task_list_shows_tasks_their_counts_and_the_waiting_inbox(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    ui: str,
    browser: Browser,
) -> None:
    await make_worker([tools, agents])
    done = await client.submit([Step(tool="fast", input={"n": 1})])
    await done.wait(timeout=20)
    waiting = await client.submit(["asks"], metadata={"user": "alice"})
    await waiting.wait_for(lambda r: r.status.value == "waiting", timeout=20)

    await browser.open(ui + "/")

    await browser.has_text("#tasks", done.task_id)
    await browser.has_text("#tasks", waiting.task_id)
    await browser.has_text("#inbox", "Approve the draft?")
    assert await browser.text("[data-count=waiting]") == "1"
    assert await browser.text("[data-count=completed]") == "1"

    await browser.open(ui + "/?status=waiting")
    await browser.has_text("#tasks", waiting.task_id)
    assert done.task_id not in await browser.text("#tasks")

    await browser.open(ui + "/?q=alice")  # metadata search
    assert await browser.count("#tasks tr[data-task]") == 1
    await browser.has_text("#tasks", waiting.task_id)


async def test_a_running_tasks_next_step_appears_live_without_a_reload(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    ui: str,
    browser: Browser,
) -> None:
    await make_worker([tools, agents])
    handle = await client.submit([Step(tool="slow", input={"sleep": 1.5}), "fast"])
    await handle.wait_for(lambda r: r.status.value == "running", timeout=20)

    await browser.open(f"{ui}/tasks/{handle.task_id}")
    await browser.run("window.__stayed = true")
    assert await browser.count('[data-lane="1"]') == 0  # step 1 has not started

    await browser.until(lambda: browser.count('[data-lane="1"]'), "step 1's lane")
    await browser.has_text("#status", "completed")
    assert await _page_was_not_reloaded(browser)
    assert "completed" in await browser.text('[data-step="0"]')


async def test_an_input_request_is_answered_from_its_form_and_the_task_resumes(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    ui: str,
    browser: Browser,
) -> None:
    await make_worker([tools, agents])
    handle = await client.submit(["asks", "fast"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)

    await browser.open(f"{ui}/tasks/{handle.task_id}")
    await browser.has_text("#input-request", "Approve the draft?")
    await browser.click('input[name="field.approved"]')
    await browser.click("#send-answer")

    await browser.has_text("#note", "answer sent")
    await browser.has_text("#status", "completed")
    assert await handle.wait(timeout=20) == {"step": 1, "payload": {"approved": True}}


async def test_a_dead_letter_is_retried_from_its_page_and_the_task_completes(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    ui: str,
    browser: Browser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_worker([tools, agents])
    gate = tmp_path / "gate"
    monkeypatch.setenv("TETHER_TEST_GATE", str(gate))
    handle = await client.submit([Step(tool="gated", input={"order": 7})])
    await handle.wait_for(lambda r: r.status.value == "failed", timeout=20)

    await browser.open(ui + "/dlq")
    row = f'#dlq tr[data-task="{handle.task_id}"]'
    await browser.has_text(row, "the gate is closed")
    gate.touch()  # the outage is fixed
    await browser.click(row + " button.retry")

    await browser.has_text("#note", "retrying")
    await browser.has_text("#status", "completed")
    assert await handle.wait(timeout=20) == {"passed": True, "input": {"order": 7}}


async def test_an_agents_task_page_shows_its_parallel_calls_and_streams_its_answer(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    ui: str,
    browser: Browser,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    await make_worker([tools, agents])
    question = f"question {uuid.uuid4().hex[:8]}"
    answer = "Durable agents checkpoint every step in JetStream, so a crash loses nothing."
    model.load(_script(question, answer))
    handle = await client.submit_agent("researcher", question)

    await browser.open(f"{ui}/tasks/{handle.task_id}")
    await browser.run("window.__stayed = true")

    await browser.has_text('pre[data-tokens="2:"]', answer, timeout=30)  # streamed live
    await browser.has_text("#status", "completed")
    assert await browser.count('[data-lane="1.0"], [data-lane="1.1"]') == 2  # the fan-out
    await browser.has_text("#usage", "280 in")
    assert await _page_was_not_reloaded(browser)
    shot = tmp_path / "task-page.png"
    await browser.screenshot(shot)
    assert shot.stat().st_size > 10_000
    if os.environ.get("TETHER_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copy(shot, SCREENSHOT)


async def test_a_running_agent_is_told_something_from_its_page(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    ui: str,
    browser: Browser,
    model: ScriptedModel,
) -> None:
    await make_worker([tools, agents])
    question = f"question {uuid.uuid4().hex[:8]}"
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ops"}}]}
    model.load({"conversations": [{"match": question, "turns": [email, {"content": "Done."}]}]})
    handle = await client.submit_agent("researcher", question)
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)  # its approval

    await browser.open(f"{ui}/tasks/{handle.task_id}")
    await browser.type("#message textarea", "Copy the security team.")
    await browser.click("#send-message")
    await browser.has_text("#note", "message sent")
    await client.send_input(handle.task_id, {"approved": True})

    assert await handle.wait(timeout=20) == "Done."
    second = [r for r in model.requests() if r["conversation"] == question][1]
    assert second["last"] == {"role": "user", "text": "Copy the security team."}
    await browser.open(f"{ui}/tasks/{handle.task_id}")
    assert await browser.count("#steer") == 0  # a finished agent reads nothing more


async def test_an_agent_is_asked_from_the_tools_page_with_a_prompt_not_json(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    ui: str,
    browser: Browser,
    model: ScriptedModel,
) -> None:
    await make_worker([tools, agents])
    question = f"question {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": question, "turns": [{"content": "Asked and done."}]}]})

    await browser.open(f"{ui}/tools")
    await browser.click('[data-tool="researcher"] a.run')
    await browser.type("#prompt", question)
    await browser.click("#start")
    await browser.has_text("#note", "started researcher")
    assert await client.handle(_shown_task(browser)).wait(timeout=20) == "Asked and done."
    first = next(r for r in model.requests() if r["conversation"] == question)
    assert first["last"] == {"role": "user", "text": question}


async def test_a_tool_runs_from_its_input_fields_and_bad_json_is_said_on_the_form(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    ui: str,
    browser: Browser,
) -> None:
    await make_worker([tools, agents])
    await browser.open(f"{ui}/tools/web_search/run")  # input {"query": str}: one field
    await browser.type('input[name="field.query"]', "durable agents")
    await browser.click("#start")
    await browser.has_text("#note", "started web_search")
    result = await client.handle(_shown_task(browser)).wait(timeout=20)
    assert result == ["durable agents: result 1", "durable agents: result 2"]

    before = await client.status_counts()
    await browser.open(f"{ui}/tools/fast/run")  # any input: a JSON box
    await browser.type('textarea[name="json"]', "{not json")
    await browser.click("#start")
    await browser.has_text("#error", "not JSON")
    assert await client.status_counts() == before  # nothing was started


def _shown_task(browser: Browser) -> str:
    """The id of the task whose page the browser shows."""
    return browser.url.split("/tasks/")[1].split("?")[0]


def _script(question: str, answer: str) -> dict[str, Any]:
    searches = {
        "tool_calls": [
            {"name": "web_search", "arguments": {"query": "durable agents"}},
            {"name": "web_search", "arguments": {"query": "NATS JetStream"}},
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20},
    }
    reply = {"content": answer, "usage": {"prompt_tokens": 180, "completion_tokens": 14}}
    turns = [searches, reply]
    return {"conversations": [{"match": question, "turns": turns}], "chunk_delay": 0.08}
