"""The dashboard over HTTP (the browser tests are in tests/e2e/test_dashboard.py): who may
use it, what a bad request gets, and the feeds and facts the pages are built from."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from tests.apps.tools import app as tools
from tests.conftest import MakeWorker
from tether import App, Client, NatsConfig, Step, StepContext, Worker
from tether.nats.store import Store
from tether.ui import Dashboard


def _text(response: httpx.Response) -> str:
    return html.unescape(response.text)


@pytest.fixture
async def ui(config: NatsConfig, api: object) -> AsyncIterator[Dashboard]:
    """The dashboard, with the API its actions go through."""
    async with Dashboard(config, port=0) as dashboard:
        yield dashboard


@pytest.fixture
async def http(ui: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    base = ui.url.rstrip("/")
    async with httpx.AsyncClient(base_url=base, headers={"origin": base}) as c:
        yield c


@pytest.fixture
def csrf(ui: Dashboard) -> dict[str, str]:
    """The field every form of this dashboard carries."""
    return {"csrf": ui.csrf}


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
    client: Client, dispatcher: object, make_worker: MakeWorker, ui: Dashboard
) -> None:
    await make_worker(tools, worker_id="worker-a")
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)
    async with httpx.AsyncClient(base_url=ui.url.rstrip("/")) as c:
        forged = await c.post(
            f"/tasks/{handle.task_id}/cancel", headers={"origin": "https://evil.example"}
        )
    assert forged.status_code == 403
    assert (await handle.get()).status.value == "waiting"


async def test_a_page_reached_by_a_foreign_name_is_refused_and_cancels_nothing(
    client: Client, dispatcher: object, make_worker: MakeWorker, ui: Dashboard, csrf: dict[str, str]
) -> None:
    """DNS rebinding: a page on rebind.example whose name now points at 127.0.0.1 reaches
    the dashboard with its own name in `Host` (and `Origin`), for GETs and actions."""
    await make_worker(tools, worker_id="worker-a")
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)
    foreign = {"host": "rebind.example:8233", "origin": "http://rebind.example:8233"}
    async with httpx.AsyncClient(base_url=ui.url.rstrip("/")) as c:
        listing = await c.get("/", headers=foreign)
        cancel = await c.post(f"/tasks/{handle.task_id}/cancel", headers=foreign, data=csrf)
        by_name = await c.get("/", headers={"host": "localhost"})
    assert listing.status_code == 421 and handle.task_id not in listing.text
    assert "--allowed-host" in listing.text
    assert cancel.status_code == 421
    assert by_name.status_code == 200
    assert (await handle.get()).status.value == "waiting"


async def test_a_name_given_with_allowed_host_is_served(config: NatsConfig) -> None:
    async with Dashboard(config, port=0, allowed_hosts=["tether.internal"]) as ui:
        async with httpx.AsyncClient(base_url=ui.url.rstrip("/")) as c:
            named = await c.get("/", headers={"host": "tether.internal:8233"})
            other = await c.get("/", headers={"host": "evil.example"})
    assert named.status_code == 200 and other.status_code == 421


async def test_a_form_without_the_pages_csrf_token_is_refused(
    client: Client, dispatcher: object, make_worker: MakeWorker, http: httpx.AsyncClient
) -> None:
    await make_worker(tools, worker_id="worker-a")
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)
    page = _text(await http.get(f"/tasks/{handle.task_id}"))
    missing = await http.post(f"/tasks/{handle.task_id}/cancel")
    wrong = await http.post(f"/tasks/{handle.task_id}/cancel", data={"csrf": "guess"})
    assert missing.status_code == 403 and wrong.status_code == 403
    assert (await handle.get()).status.value == "waiting"
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None  # every form of the page carries it
    done = await http.post(f"/tasks/{handle.task_id}/cancel", data={"csrf": token.group(1)})
    assert done.status_code == 303


async def test_an_empty_token_on_every_interface_is_no_token_a_generated_one_is_required(
    config: NatsConfig,
) -> None:
    """`tether ui --host 0.0.0.0 --token "$UNSET"`: never served without a token."""
    async with Dashboard(config, host="0.0.0.0", port=0, token="") as ui:
        assert ui.token and ui.token in ui.url
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ui.port}") as c:
            anonymous = await c.get("/")
            signed = await c.get("/", headers={"authorization": f"Bearer {ui.token}"})
    assert anonymous.status_code == 401 and signed.status_code == 200


async def test_a_bad_answer_says_what_is_wrong_and_the_task_keeps_waiting(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    http: httpx.AsyncClient,
    csrf: dict[str, str],
) -> None:
    await make_worker(tools, worker_id="worker-a")
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status.value == "waiting", timeout=20)

    bad = await http.post(f"/tasks/{handle.task_id}/input", data={**csrf, "json": "{not json"})
    wrong = await http.post(
        f"/tasks/{handle.task_id}/input", data={**csrf, "json": '{"approved": "y"}'}
    )

    assert bad.status_code == 400 and "the answer is not JSON" in bad.text
    assert wrong.status_code == 400 and "is not of type 'boolean'" in _text(wrong)
    assert (await handle.get()).status.value == "waiting"
    done = await http.post(f"/tasks/{handle.task_id}/cancel", data=csrf)
    assert done.status_code == 303
    again = await http.post(f"/tasks/{handle.task_id}/cancel", data=csrf)
    assert again.status_code == 409  # it already ended: said, not a stack trace


async def test_unknown_things_are_pages_that_say_so(
    http: httpx.AsyncClient, csrf: dict[str, str]
) -> None:
    missing = await http.get("/tasks/nope")
    assert missing.status_code == 404 and "no task 'nope'" in _text(missing)
    assert (await http.get("/?status=sleepy")).status_code == 400
    assert (await http.get("/blobs/sha256:" + "0" * 64)).status_code == 404
    assert (await http.post("/tasks/nope/cancel", data=csrf)).status_code == 404
    bad = await http.get("/tasks/nope/live?seen=-1")
    assert bad.status_code == 400 and "whole numbers" in bad.text


async def test_the_task_feed_sends_new_events_and_tokens_and_ends_with_the_task(
    client: Client, dispatcher: object, make_worker: MakeWorker, http: httpx.AsyncClient
) -> None:
    await make_worker(tools, worker_id="worker-a")
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
    client: Client,
    store: Store,
    dispatcher: object,
    make_worker: MakeWorker,
    http: httpx.AsyncClient,
) -> None:
    await make_worker(tools, worker_id="worker-a")
    await (await client.submit(["fast"])).wait(timeout=20)

    page = await http.get("/tools")

    assert page.status_code == 200
    assert 'data-tool="fast"' in page.text and "worker-a" in page.text
    workers = await store.workers.list()
    assert [w.worker_id for w in workers] == ["worker-a"]
    assert "fast" in workers[0].tools
    assert await store.tools.backlog("fast") == (0, 0, 0)


async def test_the_builds_page_lists_each_build_with_its_workers_and_what_does_not_fit(
    client: Client, config: NatsConfig, make_worker: MakeWorker, http: httpx.AsyncClient
) -> None:
    worker = await make_worker(tools, worker_id="worker-a")
    wider = App("tools")

    @wider.tool(name="search")
    async def search_v2(ctx: StepContext, data: Wider) -> list[str]:
        return [data.q]

    async with Worker(wider, config, build="v2", worker_id="worker-v2"):
        page = await http.get("/builds")
    assert page.status_code == 200
    assert f'data-build="{worker.build}"' in page.text and 'data-build="v2"' in page.text
    assert "input field &#39;limit&#39; is required now" in page.text
    tools_page = await http.get("/tools")
    assert f"<td>{worker.build}</td>" in tools_page.text  # each worker's build


class Wider(msgspec.Struct):
    q: str
    limit: int


async def test_a_stopped_worker_leaves_the_list_at_once(
    client: Client, store: Store, config: NatsConfig
) -> None:
    async with Worker(tools, config, worker_id="worker-b"):
        assert [w.worker_id for w in await store.workers.list()] == ["worker-b"]
    assert await store.workers.list() == []
