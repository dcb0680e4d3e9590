"""The dashboard over HTTP (the browser tests are in tests/e2e/test_dashboard.py): who may
use it, what a bad request gets, and the feeds and facts the pages are built from."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from tests.apps.tools import app as tools
from tether import Client, NatsConfig, Step, Worker
from tether.ui import Dashboard


def _text(response: httpx.Response) -> str:
    return html.unescape(response.text)


@pytest.fixture
async def worker(config: NatsConfig) -> AsyncIterator[Worker]:
    async with Worker(tools, config, worker_id="worker-a") as w:
        yield w


@pytest.fixture
async def ui(config: NatsConfig) -> AsyncIterator[Dashboard]:
    async with Dashboard(config, port=0) as dashboard:
        yield dashboard


@pytest.fixture
async def http(ui: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    base = ui.url.rstrip("/")
    async with httpx.AsyncClient(base_url=base, headers={"origin": base}) as c:
        yield c


async def test_with_a_token_nothing_is_served_without_it_and_the_printed_url_signs_in(
    config: NatsConfig,
) -> None:
    async with Dashboard(config, port=0, token="s3cret") as ui:
        base = ui.url.split("?")[0].rstrip("/")
        async with httpx.AsyncClient(base_url=base) as anonymous:
            refused = await anonymous.get("/")
            assert refused.status_code == 401 and "?token=" in refused.text
            assert (await anonymous.get("/tools")).status_code == 401
            wrong = await anonymous.get("/", headers={"authorization": "Bearer nope"})
            assert wrong.status_code == 401
            bearer = await anonymous.get("/", headers={"authorization": "Bearer s3cret"})
            assert bearer.status_code == 200
        async with httpx.AsyncClient(base_url=base, follow_redirects=True) as person:
            signed_in = await person.get(ui.url.removeprefix(base))  # the URL `tether ui` prints
            assert signed_in.status_code == 200 and "token=" not in str(signed_in.url)
            assert (await person.get("/tools")).status_code == 200  # by the cookie now


async def test_an_action_posted_from_another_site_is_refused_and_changes_nothing(
    client: Client, dispatcher: object, worker: Worker, ui: Dashboard
) -> None:
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)
    async with httpx.AsyncClient(base_url=ui.url.rstrip("/")) as c:
        forged = await c.post(
            f"/tasks/{handle.task_id}/cancel", headers={"origin": "https://evil.example"}
        )
    assert forged.status_code == 403
    assert (await handle.get()).status.value == "waiting"


async def test_a_bad_answer_says_what_is_wrong_and_the_task_keeps_waiting(
    client: Client, dispatcher: object, worker: Worker, http: httpx.AsyncClient
) -> None:
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)

    bad = await http.post(f"/tasks/{handle.task_id}/input", data={"json": "{not json"})
    wrong = await http.post(f"/tasks/{handle.task_id}/input", data={"json": '{"approved": "y"}'})

    assert bad.status_code == 400 and "the answer is not JSON" in bad.text
    assert wrong.status_code == 400 and "is not of type 'boolean'" in _text(wrong)
    assert (await handle.get()).status.value == "waiting"
    done = await http.post(f"/tasks/{handle.task_id}/cancel")
    assert done.status_code == 303
    again = await http.post(f"/tasks/{handle.task_id}/cancel")
    assert again.status_code == 409  # it already ended: said, not a stack trace


async def test_unknown_things_are_pages_that_say_so(http: httpx.AsyncClient) -> None:
    missing = await http.get("/tasks/nope")
    assert missing.status_code == 404 and "no task 'nope'" in _text(missing)
    assert (await http.get("/?status=sleepy")).status_code == 400
    assert (await http.get("/blobs/sha256:" + "0" * 64)).status_code == 404
    assert (await http.post("/tasks/nope/cancel")).status_code == 404
    bad = await http.get("/tasks/nope/live?seen=-1")
    assert bad.status_code == 400 and "whole numbers" in bad.text


async def test_the_task_feed_sends_new_events_and_tokens_and_ends_with_the_task(
    client: Client, dispatcher: object, worker: Worker, http: httpx.AsyncClient
) -> None:
    handle = await client.submit([Step(tool="slow", input={"sleep": 0.5}), "fast"])
    await handle.wait_for(lambda r: r.status.value == "running", timeout=20)

    kinds = []
    async with http.stream("GET", f"/tasks/{handle.task_id}/live?seen=1") as feed:
        async for line in feed.aiter_lines():  # ends when the task has ended
            if line.startswith("data: "):
                kinds.append(msgspec.json.decode(line[6:])["event"])

    assert kinds[0] == "step_started" and kinds[-1] == "completed"  # the first one skipped
    assert kinds.count("step_completed") == 2


async def test_the_tools_page_shows_each_tools_queue_and_the_workers_serving_it(
    client: Client, dispatcher: object, worker: Worker, http: httpx.AsyncClient
) -> None:
    await (await client.submit(["fast"])).wait(timeout=20)

    page = await http.get("/tools")

    assert page.status_code == 200
    assert 'data-tool="fast"' in page.text and "worker-a" in page.text
    workers = await client._store.workers.list()
    assert [w.worker_id for w in workers] == ["worker-a"]
    assert "fast" in workers[0].tools
    assert await client._store.tools.backlog("fast") == (0, 0, 0)


async def test_a_stopped_worker_leaves_the_list_at_once(client: Client, config: NatsConfig) -> None:
    async with Worker(tools, config, worker_id="worker-b"):
        assert [w.worker_id for w in await client._store.workers.list()] == ["worker-b"]
    assert await client._store.workers.list() == []
