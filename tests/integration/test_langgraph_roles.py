"""LangGraph graphs' threads under deploy/nats/roles.conf, on a real nats-server started
from that file: `tether provision` makes their bucket and blob store; a graph's worker runs
under the worker role with nothing refused, its thread's keys and blobs read and written;
no other role reads a thread; no worker deletes one or makes the bucket; and a worker that
finds the bucket missing says that an operator must provision it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats.errors
import pytest

from tests.apps.langgraph_agents import app as graphs
from tests.integration.test_grants import TENANTS, _list_after, publish_allow
from tests.integration.test_roles import (
    REFUSED_WITHIN,
    RolesServer,
    Violation,
    _provision_as_operator,
    raw,
    roles_server,
)
from tether import Client, Dispatcher, Worker
from tether.api import ApiService
from tether.errors import NotProvisionedError
from tether.integrations.langgraph import JetStreamSaver
from tether.nats.connection import close, connect
from tether.nats.layout import graph_streams
from tether.nats.provision import open_graphs
from tether.nats.store import Store
from tether.schemas.names import DEFAULT_NAMES
from tether.testing.llm import ScriptedModel

GRAPHS = DEFAULT_NAMES.graphs_bucket
GRAPHS_STREAM = DEFAULT_NAMES.kv_stream(GRAPHS)
BLOBS_STREAM = f"OBJ_{DEFAULT_NAMES.graph_blobs_bucket}"
OTHERS = ["client", "dispatcher", "gateway", "dashboard"]
PADDING = "x" * 140_000
"""Over the saver's inline limit (128 KiB): the thread's messages go to its blob store."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("graph-roles")) as started:
        yield started


@pytest.fixture(scope="module")
async def running(server: RolesServer) -> AsyncIterator[RolesServer]:
    """Provisioned by the operator; a dispatcher with the API, and the graphs' worker, each
    as its role."""
    await _provision_as_operator(server)
    dispatcher = server.config("dispatcher")
    async with (
        Dispatcher(dispatcher),
        ApiService(dispatcher),
        Worker(graphs, server.config("worker")),
    ):
        yield server


@pytest.fixture(scope="module")
async def thread(running: RolesServer, model: ScriptedModel) -> str:
    """A graph's task, run by the worker role for the client role: its id, its thread's."""
    question = model.conversation({"content": "Padded, and answered."})
    async with Client(running.config("client"), act_through_api=True) as client:
        handle = await client.submit_agent("lg_react", f"{question} {PADDING}")
        assert await handle.wait(timeout=30) == "Padded, and answered."
    return handle.task_id


async def _keys(server: RolesServer, thread_id: str) -> list[str]:
    """The thread's keys, read as the operator."""
    async with raw(server, "operator") as operator:
        info = await operator.nc.jetstream().stream_info(
            GRAPHS_STREAM, subjects_filter=DEFAULT_NAMES.kv_subject(GRAPHS, f"{thread_id}.>")
        )
    prefix = len(DEFAULT_NAMES.kv_subject(GRAPHS))
    return [subject[prefix:] for subject in info.state.subjects or {}]


async def test_tether_provision_makes_the_graphs_bucket_and_blob_store(
    running: RolesServer,
) -> None:
    async with raw(running, "operator") as operator:
        js = operator.nc.jetstream()
        for stream in graph_streams(DEFAULT_NAMES):
            assert (await js.stream_info(stream)).config.name == stream


async def test_a_graph_runs_under_the_worker_role_its_thread_and_blobs_in_the_graphs_bucket(
    running: RolesServer, thread: str
) -> None:
    kinds = {key.split(".")[1] for key in await _keys(running, thread)}
    assert {"l", "c", "v", "w", "b"} <= kinds  # latest, checkpoints, values, writes, blobs
    nc = await connect(running.config("operator"))
    try:
        saver = JetStreamSaver(nc, bucket=GRAPHS)
        found = await saver.aget_tuple({"configurable": {"thread_id": thread}})
        blobs = await nc.jetstream().stream_info(BLOBS_STREAM)
    finally:
        await close(nc)
    assert found is not None
    messages = found.checkpoint["channel_values"]["messages"]
    assert messages[-1].text == "Padded, and answered." and PADDING in messages[0].text
    assert blobs.state.messages > 0
    assert running.violations(users={"worker", "dispatcher", "client"}) == []


@pytest.mark.parametrize("role", OTHERS)
async def test_no_other_role_reads_a_thread(running: RolesServer, thread: str, role: str) -> None:
    """Every way of reading a KV key or listing a bucket's keys, asked for the thread's
    newest checkpoint: each refused to the role (the operator, asking the same, is
    answered), and a subscription to the keys' writes refused too."""
    latest = DEFAULT_NAMES.kv_subject(GRAPHS, f"{thread}.l.=")  # the root namespace's
    filtered = json.dumps({"subjects_filter": latest}).encode()
    peek = {"name": "peek", "filter_subject": latest, "ack_policy": "none"}
    consumer = json.dumps({"stream_name": GRAPHS_STREAM, "config": peek})
    asks = [
        (DEFAULT_NAMES.direct_get_subject(GRAPHS_STREAM, latest), b""),
        (f"$JS.API.STREAM.MSG.GET.{GRAPHS_STREAM}", json.dumps({"last_by_subj": latest}).encode()),
        (DEFAULT_NAMES.stream_info_subject(GRAPHS_STREAM), filtered),
        (f"$JS.API.CONSUMER.CREATE.{GRAPHS_STREAM}.peek.{latest}", consumer.encode()),
        (f"$JS.API.STREAM.MSG.GET.{BLOBS_STREAM}", json.dumps({"seq": 1}).encode()),
    ]
    since = running.mark()
    async with raw(running, "operator") as operator:
        for subject, body in asks:
            reply = await operator.nc.request(subject, body, timeout=5)
            assert reply.data or reply.headers, subject  # answered: there is something to read
    async with raw(running, role) as user:
        for subject, body in asks:
            with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
                await user.nc.request(subject, body, timeout=REFUSED_WITHIN)
            await user.refused(f'publish to "{subject}"')
        writes = DEFAULT_NAMES.kv_subject(GRAPHS, ">")
        await user.nc.subscribe(writes)
        await user.refused(f'subscription to "{writes}"')
    refused = set(running.violations(since, users={role}))
    assert {Violation(role, "Publish", subject) for subject, _ in asks} <= refused
    assert Violation(role, "Subscription", DEFAULT_NAMES.kv_subject(GRAPHS, ">")) in refused


@pytest.mark.parametrize(
    "subject",
    [
        f"$JS.API.STREAM.PURGE.{GRAPHS_STREAM}",
        f"$JS.API.STREAM.PURGE.{BLOBS_STREAM}",
        f"$JS.API.STREAM.DELETE.{GRAPHS_STREAM}",
        f"$JS.API.STREAM.CREATE.{GRAPHS_STREAM}",
        f"$JS.API.STREAM.UPDATE.{GRAPHS_STREAM}",
        f"$JS.API.STREAM.CREATE.{BLOBS_STREAM}",
    ],
)
async def test_a_worker_neither_deletes_a_thread_nor_makes_the_bucket(
    running: RolesServer, thread: str, subject: str
) -> None:
    """A purge's filter is in its body, so a grant could not hold it to one thread; a
    stream's creator chooses its subjects. Both are the operator's."""
    body = json.dumps({"filter": DEFAULT_NAMES.kv_subject(GRAPHS, f"{thread}.>")}).encode()
    async with raw(running, "worker") as worker:
        with pytest.raises(nats.errors.TimeoutError):  # refused, so never answered
            await worker.nc.request(subject, body, timeout=REFUSED_WITHIN)
        await worker.refused(f'publish to "{subject}"')
    assert "l" in {key.split(".")[1] for key in await _keys(running, thread)}  # still there


async def test_a_worker_that_finds_no_graphs_bucket_says_an_operator_must_provision(
    tmp_path: Path,
) -> None:
    """An installation provisioned before graphs had a bucket: the worker role may not make
    it, is refused at once, and names what is missing; once the operator has run
    `tether provision`, it finds the bucket and asks nothing more of the server."""
    with roles_server(tmp_path) as server:
        await _provision_as_operator(server)
        async with raw(server, "operator") as operator:
            for stream in graph_streams(DEFAULT_NAMES):
                await operator.nc.jetstream().delete_stream(stream)
        nc = await connect(server.config("worker"))
        try:
            store = await Store.open(nc, provision=False)
            started = time.monotonic()
            with pytest.raises(NotProvisionedError) as refused:
                await open_graphs(store.js, store.names)
            assert time.monotonic() - started < 3, "the refusal is noticed, not waited out"
            assert refused.value.missing == graph_streams(DEFAULT_NAMES)
            assert refused.value.refused == f"not allowed to create bucket {GRAPHS}"
            assert "an operator must run 'tether provision'" in str(refused.value)

            await _provision_as_operator(server)
            since = server.mark()
            await open_graphs(store.js, store.names)
        finally:
            await close(nc)
        assert server.violations(since, users={"worker"}) == []


def test_only_the_worker_is_granted_anything_of_the_graphs_bucket() -> None:
    """Read from the files: the worker's grants name the bucket and its blob store, and
    neither another role of roles.conf nor a tenant's app user names either."""
    mentions = [s for s in publish_allow("worker") if GRAPHS in s]
    assert {f"$KV.{GRAPHS}.>", f"$O.{DEFAULT_NAMES.graph_blobs_bucket}.>"} <= set(mentions)
    assert not [s for s in mentions if ".PURGE." in s or ".CREATE." in s or ".DELETE." in s]
    for role in OTHERS:
        assert not [s for s in publish_allow(role) if GRAPHS in s], role
    assert not [s for s in _list_after(TENANTS, 0, "APP_PUBLISH: [") if GRAPHS in s]
