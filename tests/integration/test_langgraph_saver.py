"""`JetStreamSaver`, LangGraph's checkpointer on JetStream: LangGraph's own conformance
suite, unchanged, against a real nats-server; then what the suite does not check (large
values by reference, a flat read of the latest checkpoint, nothing left by a delete, a
layout any NATS client reads, the sync API from any thread, a graph resumed)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Annotated, Any, TypedDict

import msgspec
import ormsgpack
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tests.conftest import Raw, raw_connection
from tether.integrations.langgraph import JetStreamSaver, SaverNotSetUpError, keys
from tether.nats.connection import NatsConfig, close, connect

ALL_CAPABILITIES = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
}


def _bucket() -> str:
    return f"lg{uuid.uuid4().hex[:10]}"


async def _drop(url: str, bucket: str) -> None:
    async with raw_connection(url) as raw:
        for stream in (f"KV_{bucket}", f"OBJ_{bucket}-blobs"):
            await raw.js.delete_stream(stream)


@pytest.fixture
async def saver(nats_url: str) -> AsyncIterator[JetStreamSaver]:
    """A set-up saver on a connection of the test's loop, in a bucket of its own."""
    nc = await connect(NatsConfig(url=nats_url))
    bucket = _bucket()
    saver = JetStreamSaver(nc, bucket=bucket)
    await saver.asetup()
    try:
        yield saver
    finally:
        await _drop(nats_url, bucket)
        await close(nc)


@pytest.fixture
async def spy(nats_url: str) -> AsyncIterator[Raw]:
    async with raw_connection(nats_url) as raw:
        yield raw


@pytest.mark.parametrize("opened", ["on a connection", "from a URL"])
async def test_the_conformance_suite_passes_with_every_capability(
    nats_url: str, opened: str
) -> None:
    """LangGraph's suite, as its README runs it: a fresh saver (and bucket) for each
    capability. From a URL the saver runs its own loop, so every call hops to it."""

    @checkpointer_test(name=f"JetStreamSaver {opened}")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        bucket = _bucket()
        nc = await connect(NatsConfig(url=nats_url)) if opened == "on a connection" else None
        saver = JetStreamSaver(nc if nc is not None else nats_url, bucket=bucket)
        await saver.asetup()
        try:
            yield saver
        finally:
            await saver.aclose()
            await _drop(nats_url, bucket)
            if nc is not None:
                await close(nc)

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    report.print_report()

    results = report.results
    assert {name for name, result in results.items() if result.detected} == ALL_CAPABILITIES
    failures = [f for result in results.values() for f in result.failures]
    assert report.passed_all() and not failures, failures
    assert sum(result.tests_passed for result in results.values()) == 81


def _put(
    saver: JetStreamSaver,
    thread_id: str,
    values: dict[str, Any],
    *,
    ns: str = "",
    parent: dict[str, Any] | None = None,
    **metadata: Any,
) -> Any:
    config = generate_config(thread_id, checkpoint_ns=ns)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions: ChannelVersions = {ch: saver.get_next_version(None, None) for ch in values}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.aput(config, checkpoint, generate_metadata(**metadata), versions)


async def _kv(raw: Raw, bucket: str, key: str) -> Any:
    kv = await raw.js.key_value(bucket)
    entry = await kv.get(key)
    assert entry.value is not None
    return msgspec.json.decode(entry.value)


async def _keys(raw: Raw, bucket: str, match: str = ">") -> list[str]:
    info = await raw.js.stream_info(f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.{match}")
    return sorted(s.removeprefix(f"$KV.{bucket}.") for s in (info.state.subjects or {}))


async def test_a_large_channel_value_goes_by_reference_to_the_object_store(
    saver: JetStreamSaver, spy: Raw
) -> None:
    large = "x" * (300 * 1024)
    stored = await _put(saver, "big", {"doc": large, "small": "hi"})

    found = await saver.aget_tuple(stored)
    assert found is not None and found.checkpoint["channel_values"] == {"doc": large, "small": "hi"}

    version = found.checkpoint["channel_versions"]["doc"]
    doc = await _kv(spy, saver.bucket, f"big.v.=.doc.{str(version).replace('.', '=2E')}")
    assert set(doc["value"]) == {"type", "blob"}, "a large value is not kept inline"
    digest = doc["value"]["blob"]["$blob"].removeprefix("sha256:")
    blob = await (await spy.js.object_store(f"{saver.bucket}-blobs")).get(f"sha256-{digest}")
    assert blob.data is not None and hashlib.sha256(blob.data).hexdigest() == digest
    thread, data = blob.data.split(b"\n", 1)
    assert msgspec.json.decode(thread) == "big"
    assert ormsgpack.unpackb(data) == large  # the serde's bytes, as its type tag says
    assert doc["value"]["type"] == "msgpack" and doc["value"]["blob"]["size"] == len(blob.data)

    small_version = str(found.checkpoint["channel_versions"]["small"]).replace(".", "=2E")
    small = await _kv(spy, saver.bucket, f"big.v.=.small.{small_version}")
    assert set(small["value"]) == {"type", "data"}, "a small value stays inline"


async def _quiet(sub: Any) -> list[str]:
    """The subjects `sub` got, until nothing more comes for 0.3 s."""
    seen = []
    while True:
        try:
            seen.append((await sub.next_msg(timeout=0.3)).subject)
        except TimeoutError:
            return seen


async def _requests(sub: Any, call: Any) -> list[str]:
    """The JetStream API requests `call` sends, as the server sees them (`sub`: a
    subscription to them all, made before anything is measured)."""
    await _quiet(sub)  # what came before
    await call
    return await _quiet(sub)


async def test_reading_the_latest_checkpoint_costs_the_same_after_200_checkpoints(
    saver: JetStreamSaver, spy: Raw
) -> None:
    thread = "long"
    config: Any = None
    seen: dict[int, list[str]] = {}
    sub = await spy.nc.subscribe("$JS.API.>")
    await spy.nc.flush()
    try:
        for n in range(1, 201):
            config = await _put(saver, thread, {"step": n, "messages": ["m"] * 3}, parent=config)
            await saver.aput_writes(config, [("messages", "next")], f"task-{n}")
            if n in (10, 200):
                latest = generate_config(thread)  # no checkpoint id: the latest
                seen[n] = await _requests(sub, saver.aget_tuple(latest))
                found = await saver.aget_tuple(latest)
                assert found is not None and found.checkpoint["channel_values"]["step"] == n
    finally:
        await sub.unsubscribe()

    assert len(seen[200]) == len(seen[10]) == 6, seen
    checkpoints_read = [s for s in seen[200] if f".{thread}.c." in s]
    assert checkpoints_read == [
        f"$JS.API.DIRECT.GET.KV_{saver.bucket}.$KV.{saver.bucket}.{thread}.c.=."
        + config["configurable"]["checkpoint_id"]
    ]


async def test_delete_thread_leaves_nothing_behind(saver: JetStreamSaver, spy: Raw) -> None:
    large = "y" * (200 * 1024)
    first = await _put(saver, "gone", {"doc": large}, run_id="run-1")
    second = await _put(saver, "gone", {"doc": large + "!"}, parent=first, run_id="run-1")
    await saver.aput_writes(second, [("doc", large + "?"), ("__interrupt__", "ask")], "t1")
    await _put(saver, "gone", {"a": 1}, ns="child:1")
    kept = await _put(saver, "kept", {"doc": large})
    blobs = spy.js
    store = f"OBJ_{saver.bucket}-blobs"
    before = (await blobs.stream_info(store)).state.messages
    assert before > 4 and any(k.startswith("gone.b.") for k in await _keys(spy, saver.bucket))

    await saver.adelete_thread("gone")

    assert await _keys(spy, saver.bucket, "gone.>") == []
    assert await saver.aget_tuple(generate_config("gone")) is None
    left = await _keys(spy, saver.bucket)
    assert left and all(key.startswith("kept.") for key in left)
    info = await blobs.stream_info(store, subjects_filter=f"$O.{saver.bucket}-blobs.>")
    names = info.state.subjects or {}
    # one blob left, the other thread's: its meta and its chunks, nothing else
    assert sorted(s.split(".")[2] for s in names) == ["C", "M"], names
    assert sum(names.values()) == info.state.messages < before
    found = await saver.aget_tuple(kept)
    assert found is not None and found.checkpoint["channel_values"] == {"doc": large}


async def test_the_layout_reads_as_plain_json_from_a_raw_nats_client(
    saver: JetStreamSaver, spy: Raw
) -> None:
    first = await _put(saver, "t-1", {"topic": "nats"}, ns="child:1", run_id="r-1")
    second = await _put(saver, "t-1", {"topic": "go"}, ns="child:1", parent=first, step=1)
    await saver.aput_writes(second, [("topic", "rust")], "task/1", task_path="~a")
    checkpoint_id = second["configurable"]["checkpoint_id"]
    bucket = saver.bucket

    assert await _kv(spy, bucket, "t-1.l.child=3A1") == {"checkpoint_id": checkpoint_id}
    record = await _kv(spy, bucket, f"t-1.c.child=3A1.{checkpoint_id}")
    assert record["thread_id"] == "t-1" and record["checkpoint_ns"] == "child:1"
    assert record["parent_checkpoint_id"] == first["configurable"]["checkpoint_id"]
    assert record["metadata"]["step"] == 1 and record["metadata"]["source"] == "loop"
    version = record["channel_versions"]["topic"]
    value = await _kv(spy, bucket, f"t-1.v.child=3A1.topic.{version.replace('.', '=2E')}")
    assert value["channel"] == "topic" and value["version"] == version
    assert value["value"]["type"] == "msgpack"
    assert ormsgpack.unpackb(base64.b64decode(value["value"]["data"])) == "go"
    write = await _kv(spy, bucket, f"t-1.w.child=3A1.{checkpoint_id}.task=2F1.0")
    assert {k: write[k] for k in ("task_id", "task_path", "idx", "channel")} == {
        "task_id": "task/1",
        "task_path": "~a",
        "idx": 0,
        "channel": "topic",
    }
    assert ormsgpack.unpackb(base64.b64decode(write["value"]["data"])) == "rust"
    runs = await _keys(spy, bucket, "t-1.r.>")
    assert runs == [f"t-1.r.child=3A1.r-1.{first['configurable']['checkpoint_id']}"]


async def test_a_saver_whose_bucket_was_never_set_up_says_to_call_setup(nats_url: str) -> None:
    saver = JetStreamSaver(nats_url, bucket=_bucket())
    try:
        with pytest.raises(SaverNotSetUpError, match=r"saver\.setup\(\)"):
            await saver.aget_tuple(generate_config("any"))
    finally:
        await saver.aclose()


class _State(TypedDict):
    question: str
    answer: str
    trail: list[str]


def _graph(saver: JetStreamSaver) -> Any:
    """A two-node graph whose second node asks a person (`interrupt`)."""

    def think(state: _State) -> dict[str, Any]:
        return {"trail": [*state.get("trail", []), "think"]}

    def ask(state: _State) -> dict[str, Any]:
        answer = interrupt({"question": state["question"]})
        return {"answer": answer, "trail": [*state["trail"], "ask"]}

    builder = StateGraph(_State)
    builder.add_node("think", think)
    builder.add_node("ask", ask)
    builder.add_edge(START, "think")
    builder.add_edge("think", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def _run_sync_graph(url: str, bucket: str) -> tuple[Any, Any, list[Any]]:
    """A graph run with the sync API in a thread that has no event loop."""
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    with JetStreamSaver.from_conn_string(url, bucket=bucket) as saver:
        saver.setup()
        graph = _graph(saver)
        config: RunnableConfig = {"configurable": {"thread_id": "sync"}}
        asked = graph.invoke({"question": "NATS?", "trail": []}, config)
        with JetStreamSaver.from_conn_string(url, bucket=bucket) as again:  # a new connection
            done = _graph(again).invoke(Command(resume="yes"), config)
        return asked, done, list(saver.list(config))


async def test_the_sync_api_runs_a_graph_from_a_thread_with_no_event_loop(nats_url: str) -> None:
    bucket = _bucket()
    try:
        asked, done, history = await asyncio.to_thread(_run_sync_graph, nats_url, bucket)
    finally:
        await _drop(nats_url, bucket)

    assert asked["__interrupt__"][0].value == {"question": "NATS?"}
    assert done["answer"] == "yes" and done["trail"] == ["think", "ask"]
    assert [t.metadata["step"] for t in history] == [2, 1, 0, -1]  # newest first


async def test_the_sync_api_works_from_another_thread_while_the_connection_loop_runs(
    saver: JetStreamSaver,
) -> None:
    """The saver's connection lives on this test's loop; a thread's sync calls hop to it
    while it runs, and a sync call on the loop itself is refused, not a deadlock."""

    def in_a_thread() -> Iterator[Any]:
        stored = saver.put(
            generate_config("threaded"), generate_checkpoint(), generate_metadata(step=7), {}
        )
        saver.put_writes(stored, [("ch", 1)], "t")
        yield saver.get_tuple(stored)
        yield from saver.list(None, filter={"step": 7})

    found, *listed = await asyncio.to_thread(lambda: list(in_a_thread()))
    assert found.metadata["step"] == 7 and found.pending_writes == [("t", "ch", 1)]
    assert [t.config for t in listed] == [found.config]

    with pytest.raises(RuntimeError, match="use the async methods"):
        saver.get_tuple(generate_config("threaded"))


async def test_a_saver_from_a_url_serves_sync_calls_made_inside_a_running_loop(
    nats_url: str,
) -> None:
    """As in a notebook: sync calls from code whose own loop is running. A saver from a
    URL runs its connection on a loop of its own, so they do not wait on this one."""
    bucket = _bucket()
    saver = JetStreamSaver(nats_url, bucket=bucket)
    try:
        asyncio.get_running_loop()
        saver.setup()
        stored = saver.put(generate_config("nb"), generate_checkpoint(), generate_metadata(), {})
        found = saver.get_tuple(generate_config("nb"))
        assert found is not None and found.config == stored
        assert (await saver.aget_tuple(stored)) == found  # and async calls hop to it
    finally:
        saver.close()
        await _drop(nats_url, bucket)


async def test_an_async_graph_resumes_on_another_saver_after_an_interrupt(
    saver: JetStreamSaver, nats_url: str
) -> None:
    config = {"configurable": {"thread_id": "async"}}
    asked = await _graph(saver).ainvoke({"question": "JetStream?", "trail": []}, config)
    assert asked["__interrupt__"][0].value == {"question": "JetStream?"}

    async with JetStreamSaver.from_conn_string(nats_url, bucket=saver.bucket) as other:
        state = await _graph(other).aget_state(config)
        assert state.next == ("ask",) and state.values["trail"] == ["think"]
        done = await _graph(other).ainvoke(Command(resume="yes"), config)

    assert done == {"question": "JetStream?", "answer": "yes", "trail": ["think", "ask"]}


async def _history(saver: JetStreamSaver, thread_id: str, counted: bool) -> list[str]:
    """Four checkpoints of one channel `d`: stored at the first two, then only a new
    version (a `DeltaChannel` between snapshots when `counted`, as LangGraph's metadata
    says; else a channel that is simply empty)."""
    versions: list[str] = []
    config: Any = None
    for n, values in enumerate([{"d": "seed0"}, {"d": "seed1"}, {}, {}]):
        versions.append(saver.get_next_version(versions[-1] if versions else None, None))
        checkpoint = generate_checkpoint(
            channel_values=values, channel_versions={"d": versions[-1]}
        )
        counters = {"counters_since_delta_snapshot": {"d": [n - 1, n - 1]}} if n > 1 else {}
        metadata = generate_metadata(step=n, **(counters if counted else {}))
        parent, config = config, generate_config(thread_id)
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        config = await saver.aput(config, checkpoint, metadata, {"d": versions[-1]})
    return versions


async def test_prune_keeps_the_ancestors_a_delta_channel_is_rebuilt_from(
    saver: JetStreamSaver, spy: Raw
) -> None:
    """keep_latest keeps a delta channel's ancestors back to its last stored value (the
    base class's warning), and removes the rest with the values only they named."""
    versions = await _history(saver, "delta", counted=True)
    await _history(saver, "plain", counted=False)

    await saver.aprune(["delta", "plain"], strategy="keep_latest")

    steps = [t.metadata["step"] async for t in saver.alist(generate_config("delta"))]
    assert steps == [3, 2, 1]
    values = await _keys(spy, saver.bucket, "delta.v.>")
    assert values == sorted(f"delta.v.=.d.{v.replace('.', '=2E')}" for v in versions[1:])
    assert [t.metadata["step"] async for t in saver.alist(generate_config("plain"))] == [3]
    assert len(await _keys(spy, saver.bucket, "plain.v.>")) == 1


def _extend(state: list[int] | None, batches: Sequence[list[int]]) -> list[int]:
    return [*(state or []), *(item for batch in batches for item in batch)]


class _Counting(TypedDict):
    items: Annotated[list[int], DeltaChannel(_extend, snapshot_frequency=3)]
    n: int


async def test_a_delta_channel_graph_reads_the_same_after_prune(saver: JetStreamSaver) -> None:
    """A real `DeltaChannel` (a snapshot every third update): after keep_latest its
    value is rebuilt from the kept ancestors, as before the prune."""
    builder = StateGraph(_Counting)
    builder.add_node("count", lambda s: {"items": [s["n"]], "n": s["n"] + 1})
    builder.add_edge(START, "count")
    builder.add_conditional_edges("count", lambda s: END if s["n"] >= 7 else "count")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "counting"}}
    await graph.ainvoke({"items": [], "n": 0}, config)
    before = (await graph.aget_state(config)).values

    await saver.aprune(["counting"], strategy="keep_latest")

    assert before == {"items": [0, 1, 2, 3, 4, 5, 6], "n": 7}
    assert (await graph.aget_state(config)).values == before
    kept = [t.metadata["step"] async for t in saver.alist(config)]
    assert 1 < len(kept) < 9 and kept == sorted(kept, reverse=True)


@pytest.mark.parametrize("text", ["", "a", "child:1", "1.0.5", "*>", "a=b", "ü/ß x", "=", "_-"])
def test_every_id_is_one_key_token_and_comes_back(text: str) -> None:
    token = keys.escape(text)
    assert token and all(ch.isascii() and (ch.isalnum() or ch in "_-=") for ch in token)
    assert keys.unescape(token) == text
