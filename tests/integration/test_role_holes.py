"""Issue 38's holes in deploy/nats/roles.conf, each checked by its effect on a real
nats-server started from the shipped file: a client may not move the deployment (item 6),
a worker may not rewrite it (item 7), and the dashboard's steering box works, while an
action the server refuses the dashboard answers at once with the refusal (item 10)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import nats.errors
import pytest
from nats.js.errors import NotFoundError

from tests.apps.agents import app as agents
from tests.apps.tools import app
from tests.integration.test_roles import (
    REFUSED_WITHIN,
    ROLES_CONF,
    RolesServer,
    Violation,
    _local_copy,
    _passwords,
    _provision_as_operator,
    raw,
    roles_server,
)
from tests.servers import running_server
from tether import Client, Dispatcher, Worker
from tether.api import ApiService
from tether.errors import NotAllowedError
from tether.schemas.names import DEFAULT_NAMES
from tether.testing import eventually
from tether.testing.llm import ScriptedModel
from tether.ui import Dashboard

WORKERS = DEFAULT_NAMES.workers_bucket
DEPLOYMENT = DEFAULT_NAMES.DEPLOYMENT_KEY
DEPLOYMENT_SUBJECT = DEFAULT_NAMES.kv_subject(WORKERS, DEPLOYMENT)
BUILDS = DEFAULT_NAMES.builds_bucket
AT_ONCE = 2.0
"""Seconds within which a refused action must answer (the API's timeout is 30)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("holes")) as started:
        yield started


@pytest.fixture(scope="module")
async def running(server: RolesServer) -> AsyncIterator[RolesServer]:
    """Provisioned; a dispatcher with the API, and workers of builds v1 and v2."""
    await _provision_as_operator(server)
    dispatcher, worker = server.config("dispatcher"), server.config("worker")
    async with (
        Dispatcher(dispatcher),
        ApiService(dispatcher),
        Worker(app, worker, build="v1"),
        Worker(app, worker, build="v2"),
    ):
        yield server


async def _deployment(server: RolesServer) -> bytes | None:
    """The deployment's stored bytes, read as the operator (None: never set)."""
    async with raw(server, "operator") as operator:
        bucket = await operator.nc.jetstream().key_value(WORKERS)
        try:
            return (await bucket.get(DEPLOYMENT)).value
        except nats.js.errors.KeyNotFoundError:
            return None


async def _ask(nc: nats.NATS, verb: str, body: dict[str, object]) -> dict[str, object]:
    reply = await nc.request(DEFAULT_NAMES.api_subject(verb), json.dumps(body).encode(), 10)
    answer: dict[str, object] = json.loads(reply.data)
    return answer


# -- item 6: a client does not move the deployment ----------------------------------------
async def test_a_client_asking_builds_to_ramp_is_refused_and_nothing_moves(
    running: RolesServer,
) -> None:
    before = await _deployment(running)
    async with raw(running, "client") as client:
        for action in ("ramp", "promote", "rollback"):
            body = {"action": action, "build": "v2", "percent": 50}
            answer = await _ask(client.nc, "builds", body)
            error = answer.get("error")
            assert isinstance(error, dict) and error["code"] == "invalid", answer
            assert "tether.api.deploy" in error["message"]
        listed = await _ask(client.nc, "builds", {})
    assert {row["build"] for row in listed["builds"]} >= {"v1", "v2"}  # type: ignore[union-attr]
    assert await _deployment(running) == before


async def test_the_server_refuses_a_client_the_operators_deploy_verb(
    running: RolesServer,
) -> None:
    before = await _deployment(running)
    subject = DEFAULT_NAMES.api_subject("deploy")
    async with raw(running, "client") as client:
        body = json.dumps({"action": "promote", "build": "v2"}).encode()
        with pytest.raises(nats.errors.TimeoutError):  # dropped, so never answered
            await client.nc.request(subject, body, timeout=REFUSED_WITHIN)
        await client.refused(f'publish to "{subject}"')
    assert Violation("client", "Publish", subject) in running.violations()
    assert await _deployment(running) == before


@pytest.mark.parametrize("through_api", [True, False])
async def test_a_clients_ramp_fails_at_once_saying_it_is_not_allowed(
    running: RolesServer, through_api: bool
) -> None:
    before = await _deployment(running)
    async with Client(running.config("client"), act_through_api=through_api) as client:
        started = time.monotonic()
        with pytest.raises(NotAllowedError) as refused:
            await client.ramp("v2", 50)
        took = time.monotonic() - started
    assert took < AT_ONCE, f"refused after {took:.1f}s"
    expected = DEFAULT_NAMES.api_subject("deploy") if through_api else DEPLOYMENT_SUBJECT
    assert refused.value.subject == expected
    assert await _deployment(running) == before


async def test_the_operator_ramps_through_the_api_and_in_process(running: RolesServer) -> None:
    since = running.mark()
    async with raw(running, "operator") as operator:
        answer = await _ask(operator.nc, "deploy", {"action": "ramp", "build": "v2", "percent": 25})
    assert answer["deployment"] == {  # type: ignore[index]
        "current": "v1",
        "ramp": "v2",
        "percent": 25.0,
        "updated_at": answer["deployment"]["updated_at"],  # type: ignore[index]
    }
    async with Client(running.config("operator"), act_through_api=True) as through_api:
        reply = await through_api.promote("v2")
    assert reply.deployment.current == "v2" and reply.deployment.ramp is None
    async with Client(running.config("operator")) as in_process:
        reply = await in_process.rollback("v2")
    assert reply.deployment.current == "v1" and reply.deployment.retired == ["v2"]
    async with Client(running.config("operator")) as in_process:
        await in_process.promote("v1")  # as it was, for the other tests
    assert running.violations(since) == []


# -- item 7: a worker does not rewrite the deployment -------------------------------------
async def test_the_server_refuses_a_worker_writing_or_removing_the_deployment(
    running: RolesServer,
) -> None:
    async with Client(running.config("operator")) as operator:
        await operator.promote("v1")  # something to protect
    before = await _deployment(running)
    assert before is not None
    async with raw(running, "worker") as worker:
        js = worker.nc.jetstream(timeout=REFUSED_WITHIN)
        bucket = await js.key_value(WORKERS)
        forged = json.dumps({"current": "v2"}).encode()
        with pytest.raises(nats.errors.TimeoutError):  # no PubAck: the server dropped it
            await bucket.put(DEPLOYMENT, forged)
        with pytest.raises(nats.errors.TimeoutError):
            await bucket.delete(DEPLOYMENT)
        await worker.refused(f'publish to "{DEPLOYMENT_SUBJECT}"')
    assert await _deployment(running) == before


async def test_the_server_refuses_a_worker_deleting_the_deployments_message(
    running: RolesServer,
) -> None:
    """A KV entry is a message: deleting it by sequence would clear the deployment as
    surely as a delete marker, so no worker may delete messages of tether-workers."""
    async with Client(running.config("operator")) as operator:
        await operator.promote("v1")
    async with raw(running, "operator") as operator:
        entry = await (await operator.nc.jetstream().key_value(WORKERS)).get(DEPLOYMENT)
    subject = f"$JS.API.STREAM.MSG.DELETE.{DEFAULT_NAMES.kv_stream(WORKERS)}"
    async with raw(running, "worker") as worker:
        body = json.dumps({"seq": entry.revision}).encode()
        with pytest.raises(nats.errors.TimeoutError):
            await worker.nc.request(subject, body, timeout=REFUSED_WITHIN)
        await worker.refused(f'publish to "{subject}"')
    assert await _deployment(running) == entry.value


async def test_builds_descriptions_are_the_workers_to_write_and_the_operators_to_purge(
    running: RolesServer,
) -> None:
    """A worker writes a build's tools into tether-builds; a client may not, and
    no role but the operator may purge it (which frees a build's name: `tether gc`)."""
    key = f"probe-{uuid.uuid4().hex[:8]}.probe"  # `<build>.<tool>`, a build no test uses
    info = b'{"probe": true}'
    subject = DEFAULT_NAMES.kv_subject(BUILDS, key)
    stream = DEFAULT_NAMES.kv_stream(BUILDS)
    purge = f"$JS.API.STREAM.PURGE.{stream}"
    body = json.dumps({"filter": subject}).encode()
    async with raw(running, "worker") as worker:
        await worker.nc.jetstream().publish(subject, info, timeout=5)
    for role in ("worker", "client", "dispatcher", "gateway", "dashboard"):
        async with raw(running, role) as user:
            with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
                await user.nc.request(purge, body, timeout=REFUSED_WITHIN)
            await user.refused(f'publish to "{purge}"')
    forged = DEFAULT_NAMES.kv_subject(BUILDS, key + "x")
    async with raw(running, "client") as client:
        with pytest.raises(nats.errors.TimeoutError):
            await client.nc.jetstream().publish(forged, info, timeout=REFUSED_WITHIN)
        await client.refused(f'publish to "{forged}"')
    async with raw(running, "operator") as operator:
        js = operator.nc.jetstream()
        assert (await js.get_last_msg(stream, subject)).data == info  # no purge took it
        with pytest.raises(NotFoundError):
            await js.get_last_msg(stream, forged)
        await js.purge_stream(stream, subject=subject)  # not a build the others should see


# -- item 10: the dashboard's actions -------------------------------------------------------
async def test_the_dashboard_role_tells_an_agent_something(
    running: RolesServer, model: ScriptedModel
) -> None:
    since = running.mark()
    question = f"dashboard {uuid.uuid4().hex[:8]}"
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ops"}}]}
    model.load({"conversations": [{"match": question, "turns": [email, {"content": "Done."}]}]})
    async with (
        Worker(agents, running.config("worker")),
        Client(running.config("client"), act_through_api=True) as client,
        Dashboard(running.config("dashboard"), port=0) as ui,
    ):
        handle = await client.submit([{"tool": "researcher", "input": {"input": question}}])

        async def waiting() -> None:
            assert (await handle.get()).status.value == "waiting"  # for the approval

        await eventually(waiting, timeout=20)
        base = ui.url.rstrip("/")
        async with httpx.AsyncClient(base_url=base, headers={"origin": base}) as http:
            page = await http.get(f"/tasks/{handle.task_id}")
            form = {"csrf": ui.csrf, "text": "Cite the spec."}
            told = await http.post(f"/tasks/{handle.task_id}/message", data=form)
        await client.send_input(handle.task_id, {"approved": True})
        assert await handle.wait(timeout=20) == "Done."
    assert 'id="message"' in page.text  # the steering box is offered
    assert told.status_code == 303, told.text
    second = [r for r in model.requests() if r["conversation"] == question][1]
    assert second["last"]["text"] == "Cite the spec."
    assert running.violations(since, users={"dashboard"}) == []


@pytest.fixture(scope="module")
def read_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    """roles.conf with the dashboard's action lines dropped, as its comment says to do
    for a read-only dashboard."""
    directory = tmp_path_factory.mktemp("read-only")
    conf, port, http = _local_copy(directory)
    text = conf.read_text()
    actions = text.index('"tether.api.cancel"', text.index("user: dashboard"))
    end = text.index("]", actions)
    conf.write_text(text[:actions] + text[end:])
    log = directory / "server.log"
    with running_server(conf, http, log, 20.0):
        yield RolesServer(f"127.0.0.1:{port}", log, _passwords(ROLES_CONF.read_text()))


async def test_an_action_nats_refuses_the_dashboard_answers_at_once_with_the_refusal(
    read_only: RolesServer,
) -> None:
    await _provision_as_operator(read_only)
    dispatcher = read_only.config("dispatcher")
    async with (
        Dispatcher(dispatcher),
        ApiService(dispatcher),
        Worker(app, read_only.config("worker")),
        Client(read_only.config("client")) as client,
        Dashboard(read_only.config("dashboard"), port=0) as ui,
    ):
        slow = await client.submit([{"tool": "slow", "input": {"sleep": 30}}])
        base = ui.url.rstrip("/")
        async with httpx.AsyncClient(base_url=base, headers={"origin": base}) as http:
            started = time.monotonic()
            cancel = await http.post(f"/tasks/{slow.task_id}/cancel", data={"csrf": ui.csrf})
            took = time.monotonic() - started
        record = await slow.get()
    assert took < AT_ONCE, f"answered after {took:.1f}s"
    assert cancel.status_code == 403, cancel.text
    assert "tether.api.cancel" in cancel.text and "refused" in cancel.text.lower()
    assert not record.status.is_terminal  # nothing was cancelled
