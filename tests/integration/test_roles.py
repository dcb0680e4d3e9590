"""The roles of deploy/nats/roles.conf on a real nats-server started from that file: each
role's legitimate path works with nothing refused, what a client must not do is refused
by the server, and a role that may not create streams starts at once on a provisioned
installation and says what is missing on an unprovisioned one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import nats
import nats.errors
import pytest
from mcp import Client as McpClient
from nats.aio.client import Client as NATS
from nats.js.errors import KeyNotFoundError, NotFoundError

from tests.apps.agents import app as agents
from tests.apps.tools import app
from tests.conftest import APP, ROOT, start_worker
from tests.servers import free_port, running_server
from tether import Client, Dispatcher, Layout, NatsConfig, TaskFailedError, Worker
from tether.api import ApiService
from tether.errors import NotProvisionedError
from tether.gateway import Gateway
from tether.nats.connection import close, connect
from tether.nats.layout import STAMP, expected_streams
from tether.nats.provision import provision
from tether.nats.store import Store
from tether.schemas.names import DEFAULT_NAMES
from tether.testing import eventually
from tether.testing.llm import ScriptedModel
from tether.ui import Dashboard

ROLES_CONF = ROOT / "deploy" / "nats" / "roles.conf"
ROLES = {"operator", "client", "worker", "dispatcher", "gateway", "dashboard"}
SEARCH = {"tool": "search", "input": {"query": "AI trends 2026"}}
HITS = ["agents run for hours", "durable execution matters", "MCP tasks"]
REFUSED_WITHIN = 0.5
"""Seconds a JetStream publish the server drops waits for the PubAck that never comes."""
_VIOLATION = re.compile(
    r'"[^"/]+/user:(\w+)" - (Publish|Subscription) Violation - Subject "([^"]+)"'
)


@dataclass(frozen=True)
class Violation:
    user: str
    kind: str
    """`Publish` or `Subscription`."""
    subject: str


@dataclass(frozen=True)
class RolesServer:
    address: str
    log: Path
    passwords: dict[str, str]

    def url(self, role: str) -> str:
        return f"nats://{role}:{self.passwords[role]}@{self.address}"

    def config(self, role: str) -> NatsConfig:
        return NatsConfig(url=self.url(role), name=f"test-{role}")

    def mark(self) -> int:
        """Where the log ends now: `violations(since=...)` reads only what follows."""
        return self.log.stat().st_size

    def violations(self, since: int = 0, users: set[str] = ROLES) -> list[Violation]:
        """The server's refusals, as it logs them."""
        with self.log.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        found = (Violation(*match.groups()) for match in _VIOLATION.finditer(text))
        return [violation for violation in found if violation.user in users]


def _passwords(text: str) -> dict[str, str]:
    pairs = re.findall(r'user:\s*(\w+)\s*,?\s*password:\s*"([^"]+)"', text)
    return dict(pairs)


def _local_copy(directory: Path) -> tuple[Path, int, int]:
    """roles.conf with its port, monitoring port and store dir moved into `directory`."""
    port, http = free_port(), free_port()
    text = ROLES_CONF.read_text()
    for old, new in (
        ("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{port}"),
        ("http_port: 8222", f"http_port: {http}"),
        ("store_dir: /data/jetstream", f'store_dir: "{directory / "js"}"'),
    ):
        assert text.count(old) == 1, f"expected {old!r} once in roles.conf"
        text = text.replace(old, new)
    conf = directory / "roles.conf"
    conf.write_text(text)
    return conf, port, http


@contextlib.contextmanager
def roles_server(directory: Path, timeout: float = 20.0) -> Iterator[RolesServer]:
    conf, port, http = _local_copy(directory)
    log = directory / "server.log"
    with running_server(conf, http, log, timeout):
        yield RolesServer(f"127.0.0.1:{port}", log, _passwords(ROLES_CONF.read_text()))


@dataclass
class Raw:
    """A plain nats-py connection as one role, with the refusals the server sent it."""

    nc: NATS
    refusals: list[str]

    async def refused(self, what: str) -> None:
        """Wait until the server has refused `what` (e.g. `publish to "x"`)."""

        async def seen() -> None:
            assert any(what.lower() in refusal for refusal in self.refusals), self.refusals

        await eventually(seen, timeout=5)


@contextlib.asynccontextmanager
async def raw(server: RolesServer, role: str) -> AsyncIterator[Raw]:
    refusals: list[str] = []

    async def on_error(exc: Exception) -> None:
        refusals.append(str(exc).lower())

    nc = await nats.connect(
        server.url(role),
        error_cb=on_error,
        allow_reconnect=False,
        inbox_prefix="_INBOX" if role == "operator" else f"_INBOX_{role}",  # its own only
    )
    try:
        yield Raw(nc, refusals)
    finally:
        await nc.close()


async def _provision_as_operator(server: RolesServer) -> None:
    nc = await connect(server.config("operator"))
    try:
        await provision(nc.jetstream(), Layout())
    finally:
        await close(nc)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("roles")) as started:
        yield started


@pytest.fixture(scope="module")
async def running(server: RolesServer) -> AsyncIterator[RolesServer]:
    """Provisioned by the operator; a dispatcher with the API and a worker, each as its role."""
    await _provision_as_operator(server)
    dispatcher = server.config("dispatcher")
    async with Dispatcher(dispatcher), ApiService(dispatcher), Worker(app, server.config("worker")):
        yield server


def test_the_config_has_a_user_per_role() -> None:
    assert set(_passwords(ROLES_CONF.read_text())) == ROLES


# -- what a client may not do --------------------------------------------------------------
async def test_the_server_refuses_a_client_publishing_work(running: RolesServer) -> None:
    subject = DEFAULT_NAMES.work_subject(f"nobody-{uuid.uuid4().hex[:8]}")
    async with raw(running, "client") as client:
        with pytest.raises(nats.errors.TimeoutError):  # no PubAck: the server dropped it
            await client.nc.jetstream().publish(subject, b"{}", timeout=REFUSED_WITHIN)
        await client.refused(f'publish to "{subject}"')
    assert Violation("client", "Publish", subject) in running.violations()
    async with raw(running, "operator") as operator:
        with pytest.raises(NotFoundError):
            await operator.nc.jetstream().get_last_msg(DEFAULT_NAMES.work_stream, subject)


async def test_the_server_refuses_a_client_writing_a_task_record(running: RolesServer) -> None:
    task_id = f"forged-{uuid.uuid4().hex[:8]}"
    subject = DEFAULT_NAMES.kv_subject(DEFAULT_NAMES.tasks_bucket, task_id)
    async with raw(running, "client") as client:
        tasks = await client.nc.jetstream(timeout=REFUSED_WITHIN).key_value("tether-tasks")
        with pytest.raises(nats.errors.TimeoutError):
            await tasks.put(task_id, b'{"status": "completed"}')
        await client.refused(f'publish to "{subject}"')
    assert Violation("client", "Publish", subject) in running.violations()
    async with raw(running, "operator") as operator:
        with pytest.raises(KeyNotFoundError):
            await (await operator.nc.jetstream().key_value("tether-tasks")).get(task_id)


@pytest.mark.parametrize(
    "subject",
    [
        "tether.work.>",  # the workers' steps
        "$KV.tether-checkpoints.>",  # step outputs as they are written
        "$KV.tether-workers.>",  # the steps workers hold
        "tether.api.*",  # answering API requests in the API's place
        "tether.control.cancelled.*",
    ],
)
async def test_the_server_refuses_a_client_reading_another_roles_subjects(
    running: RolesServer, subject: str
) -> None:
    async with raw(running, "client") as client:
        await client.nc.subscribe(subject)
        await client.refused(f'subscription to "{subject}"')
    assert Violation("client", "Subscription", subject) in running.violations()


async def test_a_refused_subscription_receives_nothing(running: RolesServer) -> None:
    """Core NATS only (no stream in between): the operator's probe is sent before its
    sentinel, so the client would have had it by the time the sentinel arrives."""
    probe = DEFAULT_NAMES.cancel_notice_subject(f"probe-{uuid.uuid4().hex[:8]}")
    async with raw(running, "client") as client, raw(running, "operator") as operator:
        notices = DEFAULT_NAMES.cancel_notice_subject("*")
        overheard = await client.nc.subscribe(notices)
        await client.refused(f'subscription to "{notices}"')
        sentinel = await client.nc.subscribe(client.nc.new_inbox())
        await client.nc.flush()
        await operator.nc.publish(probe, b"")
        await operator.nc.publish(sentinel.subject, b"")
        await sentinel.next_msg(timeout=5)
        with pytest.raises(nats.errors.TimeoutError):
            await overheard.next_msg(timeout=0)


@pytest.mark.parametrize("inboxes", ["_INBOX.>", "_INBOX_worker.>", "_INBOX_dispatcher.>", ">"])
async def test_a_client_cannot_overhear_anyone_elses_replies(
    running: RolesServer, inboxes: str
) -> None:
    """Hole 1 of issue 24: while another client calls the API (its task's input and result
    in the replies) and the worker pulls the task's steps (their input in the deliveries),
    a client's subscription to every other inbox is refused and receives nothing."""
    secret = f"secret-{uuid.uuid4().hex[:8]}"
    async with raw(running, "client") as eavesdropper:
        overheard = await eavesdropper.nc.subscribe(inboxes)
        await eavesdropper.refused(f'subscription to "{inboxes}"')
        async with Client(running.config("client")) as victim:
            handle = await victim.submit([{"tool": "fast", "input": {"secret": secret}}])
            await handle.wait(timeout=20)
            reply = await victim.answers(DEFAULT_NAMES.api_subject("get"), timeout=2)
        assert reply  # the API answered the victim on its own inbox
        await eavesdropper.nc.flush()  # everything the server sent it before is in
        with pytest.raises(nats.errors.TimeoutError):
            await overheard.next_msg(timeout=0.05)


@pytest.mark.parametrize(
    ("what", "subject"),
    [
        ("create a stream", "$JS.API.STREAM.CREATE.STOLEN"),
        ("purge the records", "$JS.API.STREAM.PURGE.KV_tether-tasks"),
        ("delete the work stream", "$JS.API.STREAM.DELETE.TETHER_WORK"),
        ("take a tool's steps", "$JS.API.CONSUMER.MSG.NEXT.TETHER_WORK.tool-fast"),
        ("consume the submissions", "$JS.API.CONSUMER.CREATE.TETHER_SUBMIT"),
        ("write a checkpoint", "$KV.tether-checkpoints.x.0"),
        ("store a blob", "$O.tether-blobs.M.eA"),
        ("hold a step", "$KV.tether-workers.w.x"),
    ],
)
async def test_the_server_refuses_a_client_the_jetstream_requests_of_other_roles(
    running: RolesServer, what: str, subject: str
) -> None:
    async with raw(running, "client") as client:
        with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
            await client.nc.request(subject, b"{}", timeout=REFUSED_WITHIN)
        await client.refused(f'publish to "{subject}"')
    assert Violation("client", "Publish", subject) in running.violations(), what


# -- what each role does ------------------------------------------------------------------
async def test_a_client_submits_and_follows_a_task_served_by_the_worker_and_dispatcher_roles(
    running: RolesServer,
) -> None:
    since = running.mark()
    async with Client(running.config("client"), act_through_api=True) as client:
        handle = await client.submit([SEARCH, "summarize"], strict=True)
        events = [event.kind async for event in handle.events(timeout=20)]
        assert await handle.wait(timeout=20) == "; ".join(HITS)
        assert await handle.output(0) == HITS
        assert [chunk async for chunk in handle.stream()] == []
        assert await client.text_position(handle.task_id) == 0  # what `tether watch` reads
        page, _ = await client.list_page("completed", limit=1000)
    assert events[0] == "submitted" and events[-1] == "completed"
    assert handle.task_id in {record.task_id for record in page}
    assert running.violations(since) == []


async def test_a_plain_client_submits_through_the_queue_after_one_refusal(
    running: RolesServer,
) -> None:
    """A `Client` records its tasks itself (no dispatcher hop); as a user that may not
    write records, it is refused once and submits through `tether.submit` from then on."""
    since = running.mark()
    async with Client(running.config("client")) as client:
        handles = [await client.submit([{"tool": "summarize", "input": ["a"]}]) for _ in range(3)]
        for handle in handles:
            assert await handle.wait(timeout=20) == "a"
    refused = running.violations(since)
    assert [(v.user, v.kind, v.subject.split(".")[1]) for v in refused] == [
        ("client", "Publish", "tether-tasks")
    ]


async def test_a_client_controls_its_tasks_through_the_api(running: RolesServer) -> None:
    """A client may not write records: cancelling and answering go through the API."""
    since = running.mark()
    async with raw(running, "client") as client:

        async def api(verb: str, **body: object) -> dict[str, object]:
            reply = await client.nc.request(f"tether.api.{verb}", json.dumps(body).encode(), 10)
            answer: dict[str, object] = json.loads(reply.data)
            assert set(answer) != {"error"}, answer
            return answer

        slow = await api("submit", steps=[{"tool": "slow", "input": {"sleep": 30}}])
        assert (await api("cancel", task_id=slow["task_id"]))["status"] == "cancelled"
        asks = await api("submit", steps=[{"tool": "asks"}, {"tool": "fast"}])

        async def waiting() -> None:
            assert (await api("get", task_id=asks["task_id"]))["status"] == "waiting"

        await eventually(waiting, timeout=20)
        await api("input", task_id=asks["task_id"], data={"approved": True})
        done = await api("result", task_id=asks["task_id"], timeout_ms=20_000)
    assert done["status"] == "completed"
    assert running.violations(since) == []


async def test_a_client_steers_an_agent_through_the_api_and_its_worker_reads_it(
    running: RolesServer, model: ScriptedModel
) -> None:
    """The API (dispatcher role) stores what the agent is told; the worker role reads it."""
    since = running.mark()
    question = f"roles {uuid.uuid4().hex[:8]}"
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ops"}}]}
    turns = [email, {"content": "Told, and answered."}]
    model.load({"conversations": [{"match": question, "turns": turns}]})
    async with Worker(agents, running.config("worker")), raw(running, "client") as client:

        async def api(verb: str, **body: object) -> dict[str, object]:
            reply = await client.nc.request(f"tether.api.{verb}", json.dumps(body).encode(), 10)
            answer: dict[str, object] = json.loads(reply.data)
            assert set(answer) != {"error"}, answer
            return answer

        step = {"tool": "researcher", "input": {"input": question}}
        task_id = (await api("submit", steps=[step]))["task_id"]

        async def waiting() -> None:
            assert (await api("get", task_id=task_id))["status"] == "waiting"

        await eventually(waiting, timeout=20)  # for the email's approval
        await api("message", task_id=task_id, text="Cite the spec.")
        await api("update_agent", task_id=task_id, instructions="Be brief.")
        await api("input", task_id=task_id, data={"approved": True})
        done = await api("result", task_id=task_id, timeout_ms=20_000)
    assert done["result"] == "Told, and answered."
    second = [r for r in model.requests() if r["conversation"] == question][1]
    assert second["last"]["text"] == "Cite the spec." and second["system"] == "Be brief."
    assert running.violations(since) == []


async def test_a_budget_ledger_and_an_approval_that_answers_itself_stay_in_their_roles(
    running: RolesServer, model: ScriptedModel
) -> None:
    """The worker role keeps the tree's budget ledger (in the checkpoint bucket); the
    dispatcher role answers an unanswered approval with its default when the timer fires
    (a checkpoint and a resume message, as the API's `input` does)."""
    since = running.mark()
    question = f"roles {uuid.uuid4().hex[:8]}"
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ops"}}]}
    model.load({"conversations": [{"match": question, "turns": [email, {"content": "Ok."}]}]})
    async with Worker(agents, running.config("worker")), raw(running, "client") as client:
        start = {"input": question, "token_budget": 100_000}
        body = {"steps": [{"tool": "hesitant", "input": start}]}
        reply = await client.nc.request("tether.api.submit", json.dumps(body).encode(), 10)
        task_id = json.loads(reply.data)["task_id"]
        request = {"task_id": task_id, "timeout_ms": 20_000}
        reply = await client.nc.request("tether.api.result", json.dumps(request).encode(), 25)
    assert json.loads(reply.data)["result"] == "Ok."
    told = [r for r in model.requests() if r["conversation"] == question][-1]["tool_texts"]
    assert told == ["The user denied this tool call: no answer came in time"]
    assert running.violations(since) == []


async def test_two_builds_route_their_steps_and_a_ramp_is_set_within_their_roles(
    running: RolesServer,
) -> None:
    """Workers of two builds consume their builds' subjects and send steps on to each
    other (worker role); the API's `deploy`, asked by the operator, writes where new
    tasks go (dispatcher role)."""
    since = running.mark()
    worker = running.config("worker")
    async with (
        Worker(app, worker, build="v1"),
        Worker(app, worker, build="v2"),
        raw(running, "operator") as operator,
        raw(running, "client") as client,
    ):
        ramp = {"action": "ramp", "build": "v2", "percent": 50}
        reply = await operator.nc.request("tether.api.deploy", json.dumps(ramp).encode(), 10)
        assert json.loads(reply.data)["deployment"]["ramp"] == "v2", reply.data
        ids = []
        for _ in range(20):
            body = json.dumps({"steps": [SEARCH, {"tool": "summarize"}]}).encode()
            reply = await client.nc.request("tether.api.submit", body, 10)
            ids.append(json.loads(reply.data))
            assert "task_id" in ids[-1], reply.data
        built = set()
        for submitted in ids:
            request = {"task_id": submitted["task_id"], "timeout_ms": 20_000}
            await client.nc.request("tether.api.result", json.dumps(request).encode(), 25)
            got = {"task_id": submitted["task_id"]}
            reply = await client.nc.request("tether.api.get", json.dumps(got).encode(), 10)
            built.add(json.loads(reply.data)["build"])
    assert built == {"v1", "v2"}
    assert running.violations(since) == []


async def test_a_builds_last_draining_worker_reads_what_it_waits_on_within_its_role(
    running: RolesServer,
) -> None:
    """A build's last draining worker reads the work stream's last sequence and how far a
    tool's shared consumer got (`tether.worker.draining`): both within the worker role."""
    since = running.mark()
    async with Client(running.config("client"), act_through_api=True) as client:
        handle = await client.submit([SEARCH])
        assert await handle.wait(timeout=20) == HITS
    nc = await connect(running.config("worker"))
    try:
        store = await Store.open(nc, provision=False)
        sequence = await store.work_sequence()
        assert sequence > 0  # the task's step, at least
        assert await store.shared_steps_handled("search", sequence)  # it ran: acknowledged
    finally:
        await close(nc)
    assert running.violations(since) == []


async def test_the_gateway_role_lists_tools_and_runs_a_tool_call(running: RolesServer) -> None:
    async with (
        Gateway(running.config("gateway"), port=0) as gateway,
        McpClient(gateway.url, mode="legacy") as mcp,
    ):
        tools = {tool.name for tool in (await mcp.list_tools()).tools}
        result = await mcp.call_tool("search", {"query": "AI trends 2026", "limit": 2})
    assert {"search", "summarize", "run_plan"} <= tools
    assert result.structured_content == {"result": HITS[:2]}
    assert running.violations(users={"gateway"}) == []


async def test_the_dashboard_role_shows_tasks_and_cancels_one(running: RolesServer) -> None:
    async with Client(running.config("client")) as client:
        done = await client.submit([SEARCH])
        await done.wait(timeout=20)
        slow = await client.submit([{"tool": "slow", "input": {"sleep": 30}}])
        async with Dashboard(running.config("dashboard"), port=0) as ui:
            base = ui.url.rstrip("/")
            async with httpx.AsyncClient(base_url=base, headers={"origin": base}) as http:
                listed = await http.get("/?status=completed")
                page = await http.get(f"/tasks/{done.task_id}")
                tools = await http.get("/tools")
                dlq = await http.get("/dlq")
                builds = await http.get("/builds")
                cancel = f"/tasks/{slow.task_id}/cancel"
                cancelled = await http.post(cancel, data={"csrf": ui.csrf})
                form = {"csrf": ui.csrf, "json": '{"query": "started here"}'}
                started = await http.post("/tools/search/run", data=form, timeout=30)
        record = await slow.wait_until_done(timeout=20)
        assert started.status_code == 303, started.text
        run = client.handle(started.headers["location"].split("/tasks/")[1].split("?")[0])
        assert "started here" in str(await run.wait(timeout=20))
    assert listed.status_code == 200 and done.task_id in listed.text
    assert page.status_code == 200 and "agents run for hours" in page.text
    assert tools.status_code == 200 and "search" in tools.text
    assert dlq.status_code == 200 and builds.status_code == 200
    assert cancelled.status_code == 303 and record.status.value == "cancelled"
    assert running.violations(users={"dashboard"}) == []


async def test_a_sleep_an_input_timeout_and_a_deadline_fire_within_their_roles(
    running: RolesServer,
) -> None:
    """The worker asks for a sleep's and an input wait's timers, the dispatcher for a
    deadline's, on the work stream; the dispatcher alone stores them in TETHER_TIMERS
    and acts when they fire."""
    since = running.mark()
    async with Client(running.config("client"), act_through_api=True) as client:
        sleeper = await client.submit([{"tool": "naps", "input": {"seconds": 1}}, "clock"])
        asker = await client.submit([{"tool": "asks_briefly", "input": {"timeout": 1}}])
        late = await client.submit(
            [{"tool": "naps", "input": {"seconds": 3600}}, "clock"], deadline=timedelta(seconds=2)
        )
        assert (await sleeper.wait(timeout=20))["given"]["napped"] == 1
        for handle, reason in ((asker, "InputExpired"), (late, "DeadlineExceeded")):
            with pytest.raises(TaskFailedError) as failed:
                await handle.wait(timeout=20)
            assert failed.value.error is not None and failed.value.error.type == reason
    assert running.violations(since) == []


async def test_no_role_was_refused_anything_on_its_legitimate_paths(
    running: RolesServer,
) -> None:
    """The worker and the dispatcher ran throughout the module (the client's refusals
    above are the only ones the server logged)."""
    assert running.violations(users=ROLES - {"client"}) == []


async def test_a_worker_hands_on_the_steps_a_dead_worker_held(tmp_path: Path) -> None:
    """Every worker reads the others' entries in tether-workers and removes a dead one's:
    the step the dead one held (its message acknowledged) runs again, with nothing refused."""
    with roles_server(tmp_path) as server:
        await _provision_as_operator(server)
        async with Dispatcher(server.config("dispatcher")), Client(server.config("client")) as c:
            doomed = start_worker(server.config("worker"), APP, log=tmp_path / "worker.log")
            try:
                handle = await c.submit([{"tool": "slow", "input": {"sleep": 1.0}}])
                (held,) = await eventually(lambda: _held(server, handle.task_id), timeout=20)
            finally:
                doomed.kill()
                doomed.wait()
            async with Worker(app, server.config("worker")) as survivor:
                assert await handle.wait(timeout=20) == {"step": 0, "slept": 1.0}
        assert survivor.worker_id not in held  # held by the dead one, handed on by this one
        assert server.violations(users={"worker"}) == []


async def _held(server: RolesServer, task_id: str) -> list[str]:
    """The entries `<worker>.<task_id>.0` in tether-workers (read as the operator)."""
    bucket = DEFAULT_NAMES.workers_bucket
    async with raw(server, "operator") as operator:
        info = await operator.nc.jetstream().stream_info(
            DEFAULT_NAMES.kv_stream(bucket),
            subjects_filter=DEFAULT_NAMES.kv_subject(bucket, f"*.{task_id}.0"),
        )
    subjects = list(info.state.subjects or {})
    assert subjects, f"no worker holds step 0 of {task_id}"
    return subjects


# -- provisioning -------------------------------------------------------------------------
async def test_roles_that_may_not_provision_say_what_is_missing_then_start_once_provisioned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with roles_server(tmp_path) as server:
        started = time.monotonic()
        with pytest.raises(NotProvisionedError) as refused:
            async with Worker(app, server.config("worker")):
                pass
        assert time.monotonic() - started < 3, "refusals are noticed, not waited out"
        assert refused.value.missing == expected_streams(DEFAULT_NAMES)
        assert refused.value.refused == "not allowed to create stream TETHER_SUBMIT"
        assert "an operator must run 'tether provision'" in str(refused.value)
        with pytest.raises(NotProvisionedError, match="nothing of it is there"):
            async with Client(server.config("client"), provision=False):
                pass

        await _provision_as_operator(server)
        async with Worker(app, server.config("worker")), Client(server.config("client")):
            pass  # started: the installation's stamp is current

        await _unstamp(server)  # as an older Tether would have left it
        with caplog.at_level(logging.WARNING, "tether.nats"):
            async with Dispatcher(server.config("dispatcher")):
                pass
        assert "run 'tether provision' as an operator" in caplog.text
        assert server.violations(users={"dispatcher"}) == [
            Violation("dispatcher", "Publish", "$JS.API.STREAM.CREATE.TETHER_SUBMIT")
        ]


async def _unstamp(server: RolesServer) -> None:
    async with raw(server, "operator") as operator:
        js = operator.nc.jetstream()
        config = (await js.stream_info(DEFAULT_NAMES.work_stream)).config
        assert config.metadata is not None and STAMP in config.metadata
        config.metadata = {}
        await js.update_stream(config)


async def test_tether_provision_as_a_role_that_may_not_says_so(tmp_path: Path) -> None:
    with roles_server(tmp_path) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TETHER_NATS_URL": server.url("worker")}
        process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "tether.cli", "provision"],
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode not in (0, None)
    assert "may not create or update the streams under prefix 'tether'" in err.decode()


@pytest.mark.parametrize("role", sorted(ROLES - {"operator"}))
async def test_only_the_operator_may_purge_the_blob_store(running: RolesServer, role: str) -> None:
    """Hole 7 of issue 24: a purge of OBJ_tether-blobs (all of it, or one object's chunks)
    is refused to every role but the operator's."""
    subject = "$JS.API.STREAM.PURGE.OBJ_tether-blobs"
    async with raw(running, role) as user:
        with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
            await user.nc.request(subject, b"{}", timeout=REFUSED_WITHIN)
        await user.refused(f'publish to "{subject}"')


async def test_a_worker_stores_a_blob_again_when_it_is_old_without_purging(
    running: RolesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that finds a blob older than half its grace stores it again (so the sweep
    leaves it alone): it refreshes the blob's time, and needs no purge to do it."""
    import tether.nats.blobs as blobs

    data = json.dumps({"text": "x" * 300_000, "id": uuid.uuid4().hex}).encode()
    since = running.mark()
    nc = await connect(running.config("worker"))
    try:
        store = await Store.open(nc, provision=False)
        ref = json.loads(await store.blobs.by_reference(data))["$blob"]
        stored = await store.blobs.stored_at(ref)
        assert stored is not None
        monkeypatch.setattr(blobs, "_now", lambda: stored + blobs.BLOB_GRACE)
        assert json.loads(await store.blobs.by_reference(data))["$blob"] == ref
        again = await store.blobs.stored_at(ref)
        assert again is not None and again > stored  # its time moved on: the sweep keeps it
        assert await store.blobs.load(ref) == data
    finally:
        await close(nc)
    assert running.violations(since, users={"worker"}) == []


async def test_a_clients_push_consumer_cannot_deliver_into_tether_subjects(
    running: RolesServer,
) -> None:
    """Hole 4 of issue 24: a client may create consumers (it follows records, events and
    text through ordered ones), and JetStream does not check a push consumer's delivery
    subject against its creator's permissions. But it delivers only to a literal
    subscription of that subject, which a client may no longer make on a Tether subject:
    a consumer that delivers into `tether.status.<id>` reaches neither the status stream
    nor the gateway's and dashboard's `tether.status.>` subscribers."""
    target = f"tether.status.planted-{uuid.uuid4().hex[:8]}"
    async with raw(running, "client") as attacker, raw(running, "operator") as operator:
        watching = await operator.nc.subscribe("tether.status.>")  # as the dashboard does
        literal = await attacker.nc.subscribe(target)
        await attacker.refused(f'subscription to "{target}"')
        await literal.unsubscribe()
        config = {
            "stream_name": "KV_tether-tasks",
            "config": {
                "name": "planter",
                "filter_subject": "$KV.tether-tasks.>",
                "deliver_subject": target,
                "deliver_policy": "all",
                "ack_policy": "none",
            },
        }
        create = "$JS.API.CONSUMER.CREATE.KV_tether-tasks.planter.$KV.tether-tasks.>"
        created = json.loads((await attacker.nc.request(create, json.dumps(config).encode())).data)
        assert "error" not in created  # the server takes the config as it is...
        sentinel = f"tether.status.sentinel-{uuid.uuid4().hex[:8]}"
        await operator.nc.publish(sentinel, b"{}")
        first = await watching.next_msg(timeout=5)
        js = operator.nc.jetstream()
        info = await js.consumer_info("KV_tether-tasks", created["name"])
    assert first.subject == sentinel  # ...but delivers nothing: no one may listen there
    assert info.delivered.consumer_seq == 0
    with pytest.raises(NotFoundError):
        await _last_on(running, target)


FOLLOWED = {
    "client": "TETHER_STATUS",
    "dispatcher": "KV_tether-tasks",
    "gateway": "TETHER_TOKENS",
    "dashboard": "TETHER_DLQ",
    "worker": "TETHER_WORK",
}


@pytest.mark.parametrize("role", sorted(FOLLOWED))
async def test_no_role_but_the_operator_creates_a_consumer_through_the_unfiltered_subject(
    running: RolesServer, role: str
) -> None:
    """The consumers part of issue 24: `$JS.API.CONSUMER.CREATE.<stream>` takes any
    filter, so a role that follows one subject of a stream could read all of it; every
    Tether process creates its consumers by name and filter instead (the module's
    followers above ran with these permissions)."""
    stream = FOLLOWED[role]
    probe = f"tether.probe.{uuid.uuid4().hex[:8]}"
    request = {"stream_name": stream, "config": {"filter_subject": probe, "ack_policy": "none"}}
    subject = f"$JS.API.CONSUMER.CREATE.{stream}"
    async with raw(running, role) as follower:
        with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
            await follower.nc.request(subject, json.dumps(request).encode(), REFUSED_WITHIN)
        await follower.refused(f'publish to "{subject}"')
    async with raw(running, "operator") as operator:
        consumers = await operator.nc.jetstream().consumers_info(stream)
    assert [c for c in consumers if c.config.filter_subject == probe] == []


async def test_a_worker_cannot_take_timer_requests_with_a_wildcard_filter(tmp_path: Path) -> None:
    """Found by the independent check: a permission's `*` also matches a literal `*` or
    `>`, so a worker may ask for a consumer on `tether.work.*`, which would take the
    dispatchers' timer requests too. `tether provision` creates the schedules consumer
    with the streams (no dispatcher has run here), and the work queue refuses any
    consumer that overlaps it."""
    with roles_server(tmp_path) as server:
        await _provision_as_operator(server)
        async with raw(server, "worker") as worker:
            for wildcard in ("*", ">"):
                config = {
                    "name": "hog",
                    "filter_subject": f"tether.work.{wildcard}",
                    "ack_policy": "explicit",
                }
                body = json.dumps({"stream_name": "TETHER_WORK", "config": config}).encode()
                subject = f"$JS.API.CONSUMER.CREATE.TETHER_WORK.hog.tether.work.{wildcard}"
                reply = json.loads((await worker.nc.request(subject, body)).data)
                assert "not unique" in reply["error"]["description"], reply
        async with raw(server, "operator") as operator:
            consumers = await operator.nc.jetstream().consumers_info("TETHER_WORK")
    assert [c.name for c in consumers] == ["schedules"]


async def _last_on(running: RolesServer, subject: str) -> None:
    async with raw(running, "operator") as operator:
        await operator.nc.jetstream().get_msg("TETHER_STATUS", subject=subject)


@pytest.mark.parametrize("role", ["gateway", "dashboard"])
@pytest.mark.parametrize(
    "subject",
    ["$KV.tether-tasks.victim", "$KV.tether-checkpoints.victim.0", "tether.work.fast"],
)
async def test_the_gateway_and_dashboard_write_no_task_they_ask_the_api(
    running: RolesServer, role: str, subject: str
) -> None:
    """Item 5 of issue 24: their actions go through `tether.api.*` (the dashboard and
    gateway tests above cancel, answer and retry that way), so their users may not write
    a record, a checkpoint or work themselves."""
    async with raw(running, role) as user:
        await user.nc.publish(subject, b"{}")
        await user.refused(f'publish to "{subject}"')


async def test_tether_status_of_a_running_task_works_as_the_client(running: RolesServer) -> None:
    """Every read `tether status` makes (record, heartbeat, last event, what a stalled task
    waits for, whether a dispatcher runs) is allowed to the client role."""
    from tests.e2e.test_cli_ops import tether

    config = running.config("client")
    since = running.mark()
    async with Client(config, act_through_api=True) as client:  # it may not write records
        slow = await client.submit([{"tool": "slow", "input": {"sleep": 30}}])

        async def beating() -> None:
            assert await client.heartbeat(slow.task_id) is not None

        await eventually(beating, timeout=20)
        status = await tether(config, "status", slow.task_id)
        await client.cancel(slow.task_id)
    assert status.code == 0 and "heartbeat" in status.out, status
    assert running.violations(since, users={"client"}) == []
