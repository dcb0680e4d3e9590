"""Tenants apart (issue 24): deploy/nats/tenants.conf gives each tenant a NATS account, and
one tenant's users can neither see, overhear nor act on the other's tasks, replies
included, though both run Tether under the same prefix on the same server."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import nats
import nats.errors
import pytest
from nats.js.errors import NotFoundError

from tests.apps.tools import app
from tests.conftest import ROOT
from tests.servers import free_port, running_server
from tether import Client, Dispatcher, NatsConfig, TaskNotFoundError, Worker
from tether.api import ApiService
from tether.testing import eventually

TENANTS_CONF = ROOT / "deploy" / "nats" / "tenants.conf"
REFUSED_WITHIN = 0.5
"""Seconds a request the server drops waits for the answer that never comes."""


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("tenants")
    port, http = free_port(), free_port()
    text = TENANTS_CONF.read_text()
    for old, new in (
        ("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{port}"),
        ("http_port: 8222", f"http_port: {http}"),
        ("store_dir: /data/jetstream", f'store_dir: "{directory / "js"}"'),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    conf = directory / "tenants.conf"
    conf.write_text(text)
    with running_server(conf, http, directory / "server.log"):
        yield f"127.0.0.1:{port}"


def _config(address: str, user: str) -> NatsConfig:
    """The user's connection, with its password from the config."""
    passwords = dict(_USER.findall(TENANTS_CONF.read_text()))
    return NatsConfig(url=f"nats://{user}:{passwords[user]}@{address}", name=f"test-{user}")


_USER = re.compile(r'user: ([\w-]+),?\s+password: "([^"]+)"')


@pytest.fixture(scope="module")
async def tenants(address: str) -> AsyncIterator[str]:
    """Each tenant's own Tether: a dispatcher with the API and a worker, as its admin."""
    acme, globex = _config(address, "acme-admin"), _config(address, "globex-admin")
    quick = timedelta(0)  # nothing runs when the module ends: stop at once
    async with Dispatcher(acme), ApiService(acme), Worker(app, acme, shutdown_grace=quick):
        async with (
            Dispatcher(globex),
            ApiService(globex),
            Worker(app, globex, shutdown_grace=quick),
        ):
            yield address


async def test_a_tenants_tasks_are_invisible_and_untouchable_to_another(tenants: str) -> None:
    secret = f"acme-secret-{uuid.uuid4().hex[:8]}"
    listener = await nats.connect(_config(tenants, "globex-admin").url)
    try:
        everything = await listener.subscribe(">")  # all GLOBEX sees, its admin's rights
        async with Client(_config(tenants, "acme-app")) as acme:
            handle = await acme.submit([{"tool": "fast", "input": {"secret": secret}}])
            result = await handle.wait(timeout=20)
            assert result["payload"] == {"secret": secret}
            assert await acme.answers("tether.api.get", timeout=2)
        async with Client(_config(tenants, "globex-app")) as globex:
            assert await globex.find(handle.task_id) is None
            assert await globex.history(handle.task_id) == []
            with pytest.raises(TaskNotFoundError):
                await globex.get(handle.task_id)
            globex.act_through_api = True  # GLOBEX's API knows nothing of it either
            with pytest.raises(TaskNotFoundError):
                await globex.cancel(handle.task_id)
        await listener.flush()
        heard = []
        while True:
            try:
                heard.append(await everything.next_msg(timeout=0.05))
            except nats.errors.TimeoutError:
                break
    finally:
        await listener.close()
    assert any(msg.subject.startswith("_INBOX_globex-app.") for msg in heard)  # it hears GLOBEX
    leaked = [msg.subject for msg in heard if secret.encode() in msg.data]
    assert leaked == [], leaked


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.API.CONSUMER.CREATE.TETHER_WORK.thief",  # named, its filter in the body
        "$JS.API.CONSUMER.CREATE.TETHER_WORK.thief.tether.work.>",
        "$JS.API.CONSUMER.MSG.NEXT.TETHER_WORK.tool-fast",
    ],
)
async def test_an_app_user_takes_no_work_off_its_tenants_queue(tenants: str, subject: str) -> None:
    """Found by the independent check: the app's deny list stopped only the unfiltered
    create, so a named consumer could read and acknowledge (delete) work."""
    config = {"durable_name": "thief", "filter_subject": "tether.work.>", "ack_policy": "explicit"}
    body = json.dumps({"stream_name": "TETHER_WORK", "config": config}).encode()
    refusals: list[str] = []

    async def on_error(exc: Exception) -> None:
        refusals.append(str(exc).lower())

    app = await nats.connect(
        _config(tenants, "acme-app").url, error_cb=on_error, inbox_prefix="_INBOX_acme-app"
    )
    try:
        with pytest.raises(nats.errors.TimeoutError):
            await app.request(subject, body, timeout=0.5)
    finally:
        await app.close()
    assert any(f'publish to "{subject.lower()}"' in refusal for refusal in refusals), refusals


def test_the_config_is_two_accounts_with_jetstream() -> None:
    text = TENANTS_CONF.read_text()
    assert re.findall(r"^  (\w+) \{$", text, re.MULTILINE) == ["ACME", "GLOBEX"]
    assert len(_USER.findall(text)) == 4


@contextlib.asynccontextmanager
async def _as(address: str, user: str) -> AsyncIterator[tuple[nats.NATS, list[str]]]:
    """A plain connection as `user`, with the refusals the server sent it."""
    refusals: list[str] = []

    async def on_error(exc: Exception) -> None:
        refusals.append(str(exc).lower())

    inbox = "_INBOX" if user.endswith("-admin") else f"_INBOX_{user}"
    nc = await nats.connect(_config(address, user).url, error_cb=on_error, inbox_prefix=inbox)
    try:
        yield nc, refusals
    finally:
        await nc.close()


async def _refused(refusals: list[str], subject: str) -> None:
    async def seen() -> None:
        assert any(f'publish to "{subject.lower()}"' in r for r in refusals), refusals

    await eventually(seen, timeout=5)


async def test_an_app_user_may_not_change_its_tenants_streams(tenants: str) -> None:
    """Item 8 of issue 38: measured, `STREAM.UPDATE TETHER_STATUS` was accepted."""
    async with _as(tenants, "acme-admin") as (admin, _):
        before = (await admin.jetstream().stream_info("TETHER_STATUS")).config
    config = before.as_dict()
    config["description"] = "taken over"
    subject = "$JS.API.STREAM.UPDATE.TETHER_STATUS"
    async with _as(tenants, "acme-app") as (app_user, refusals):
        with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
            await app_user.request(subject, json.dumps(config).encode(), timeout=REFUSED_WITHIN)
        await _refused(refusals, subject)
    async with _as(tenants, "acme-admin") as (admin, _):
        after = (await admin.jetstream().stream_info("TETHER_STATUS")).config
    assert after.description == before.description != "taken over"


async def test_an_app_user_may_not_delete_the_dispatchers_consumer(tenants: str) -> None:
    """Item 8 of issue 38: measured, the dispatchers' consumer was deleted."""
    subject = "$JS.API.CONSUMER.DELETE.TETHER_SUBMIT.dispatcher"
    async with _as(tenants, "acme-app") as (app_user, refusals):
        with pytest.raises(nats.errors.TimeoutError):
            await app_user.request(subject, b"", timeout=REFUSED_WITHIN)
        await _refused(refusals, subject)
    async with _as(tenants, "acme-admin") as (admin, _):
        info = await admin.jetstream().consumer_info("TETHER_SUBMIT", "dispatcher")
    assert info.name == "dispatcher"


@pytest.mark.parametrize(
    ("what", "stream", "subject"),
    [
        ("tell an agent past the API", "TETHER_STATUS", "tether.status.victim.inbox"),
        ("set a timer", "TETHER_TIMERS", "tether.timers.victim.deadline"),
        ("ask for a timer", "TETHER_WORK", "tether.work._schedule"),
        ("store a blob chunk", "OBJ_tether-blobs", "$O.tether-blobs.C.forged"),
        ("write a record", "KV_tether-tasks", "$KV.tether-tasks.victim"),
    ],
)
async def test_an_app_user_writes_nothing_a_client_may_not(
    tenants: str, what: str, stream: str, subject: str
) -> None:
    async with _as(tenants, "acme-app") as (app_user, refusals):
        with pytest.raises(nats.errors.TimeoutError):  # no PubAck: the server dropped it
            await app_user.jetstream().publish(subject, b"{}", timeout=REFUSED_WITHIN)
        await _refused(refusals, subject)
    async with _as(tenants, "acme-admin") as (admin, _):
        with pytest.raises(NotFoundError):
            await admin.jetstream().get_last_msg(stream, subject)


async def test_an_app_user_may_not_move_its_tenants_deployment(tenants: str) -> None:
    subject = "tether.api.deploy"
    async with _as(tenants, "acme-app") as (app_user, refusals):
        body = json.dumps({"action": "promote", "build": "v9"}).encode()
        with pytest.raises(nats.errors.TimeoutError):
            await app_user.request(subject, body, timeout=REFUSED_WITHIN)
        await _refused(refusals, subject)


async def test_an_app_user_does_a_clients_work(tenants: str) -> None:
    """Submit, follow, status and cancel through the API: what the allow-list is for (a
    refused action raises NotAllowedError at once, a refused read times out)."""
    async with Client(_config(tenants, "acme-app"), act_through_api=True) as acme:
        handle = await acme.submit([{"tool": "fast", "input": {"n": 1}}], strict=True)
        events = [event.kind async for event in handle.events(timeout=20)]
        assert (await handle.wait(timeout=20))["payload"] == {"n": 1}
        slow = await acme.submit([{"tool": "slow", "input": {"sleep": 30}}])
        assert (await acme.get(slow.task_id)).task_id == slow.task_id
        assert (await acme.cancel(slow.task_id)).status.value == "cancelled"
        listed = await acme.builds()
    assert events[0] == "submitted" and events[-1] == "completed"
    assert listed.deployment is not None
