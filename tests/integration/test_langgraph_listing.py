"""`JetStreamSaver.list()` of a long history (issue 49, item 8): read a batch of keys per
request, not about ten requests per checkpoint, and the same checkpoints, values and
pending writes as reading each checkpoint alone (`get_tuple`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from tests.conftest import Raw, raw_connection
from tether.integrations.langgraph import JetStreamSaver
from tether.integrations.langgraph.bucket import SaverBucket
from tether.nats.connection import NatsConfig, close, connect

STEPS = 60
BIG = "x" * 300_000
MARKER = "$JS.API.TEST.MARKER"


class _State(TypedDict):
    count: int
    note: str
    big: str


def _graph(saver: JetStreamSaver) -> Any:
    """A node that counts to `STEPS` (a large value at step 5, stored as a blob), then
    one that asks a person: a history with pending writes at its end."""

    def count(state: _State) -> dict[str, Any]:
        n = state["count"] + 1
        return {"count": n, "note": f"step {n}", **({"big": BIG} if n == 5 else {})}

    def ask(state: _State) -> dict[str, Any]:
        return {"note": str(interrupt({"sure": state["count"]}))}

    builder = StateGraph(_State)
    builder.add_node("count", count)
    builder.add_node("ask", ask)
    builder.add_edge(START, "count")
    builder.add_conditional_edges("count", lambda s: "count" if s["count"] < STEPS else "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
async def saver(nats_url: str) -> AsyncIterator[JetStreamSaver]:
    """A saver holding two threads of `_graph`'s history, in a bucket of its own."""
    nc = await connect(NatsConfig(url=nats_url))
    bucket = f"lgl{uuid.uuid4().hex[:10]}"
    saver = JetStreamSaver(nc, bucket=bucket)
    await saver.asetup()
    for thread in ("one", "two"):
        config: RunnableConfig = {"configurable": {"thread_id": thread}, "recursion_limit": 200}
        await _graph(saver).ainvoke({"count": 0, "note": "", "big": ""}, config)
    try:
        yield saver
    finally:
        async with raw_connection(nats_url) as raw:
            for stream in (f"KV_{bucket}", f"OBJ_{bucket}-blobs"):
                await raw.js.delete_stream(stream)
        await close(nc)


def _thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


async def _requests(spy: Raw, call: Awaitable[Any]) -> list[str]:
    """The JetStream API requests `call` sends, as the server sees them: a copy of each
    reaches `spy` before its answer leaves the server, so a marker `spy` sends after the
    call comes back after them all."""
    sub = await spy.nc.subscribe("$JS.API.>")
    await spy.nc.flush()
    await call
    await spy.nc.publish(MARKER, b"")
    seen = []
    while (subject := (await sub.next_msg(timeout=5)).subject) != MARKER:
        seen.append(subject)
    await sub.unsubscribe()
    return seen


async def test_a_long_history_is_listed_in_a_few_requests(
    saver: JetStreamSaver, nats_url: str
) -> None:
    """62 checkpoints of about seven keys each: the listing of its checkpoint keys, then
    every key of the thread in one scan (a request per thousand keys); the large value
    that 56 of them hold is read once."""
    listed: list[CheckpointTuple] = []

    async def listing() -> None:
        listed.extend([t async for t in saver.alist(_thread("one"))])

    async with raw_connection(nats_url) as spy:
        requests = await _requests(spy, listing())
        alone = await _requests(spy, saver.aget_tuple(listed[-10].config))

    assert len(listed) == STEPS + 2
    assert listed[0].checkpoint["channel_values"]["count"] == STEPS
    assert listed[0].pending_writes, "the interrupt of the node that asks"
    assert sum(t.checkpoint["channel_values"].get("big") == BIG for t in listed) == STEPS - 4
    kv = [s for s in requests if f"KV_{saver.bucket}" in s]
    assert len(kv) <= 3, kv
    blob = [s for s in requests if f"KV_{saver.bucket}" not in s]
    assert blob == [s for s in alone if f"KV_{saver.bucket}" not in s], "one blob read"


def _same(listed: list[CheckpointTuple], alone: list[CheckpointTuple | None]) -> None:
    for found, expected in zip(listed, alone, strict=True):
        assert expected is not None
        assert found.config == expected.config
        assert found.checkpoint == expected.checkpoint
        assert found.metadata == expected.metadata
        assert found.parent_config == expected.parent_config
        assert found.pending_writes == expected.pending_writes


@pytest.mark.parametrize(
    "config, options",
    [
        (_thread("one"), {}),
        (None, {}),
        (_thread("two"), {"filter": {"source": "loop"}}),
        (_thread("one"), {"limit": 40}),
        (_thread("two"), {"before": "the 10th"}),
        ({"configurable": {"thread_id": "one", "checkpoint_ns": ""}}, {}),
    ],
    ids=["a thread", "every thread", "a filter", "a limit", "before", "a namespace"],
)
async def test_a_listing_reads_as_each_checkpoint_read_alone(
    saver: JetStreamSaver, config: RunnableConfig | None, options: dict[str, Any]
) -> None:
    """Values (the large one from its blob), pending writes (the interrupt's) and the
    newest-first order are those `get_tuple` reads checkpoint by checkpoint."""
    if options.get("before") == "the 10th":
        tenth = [t async for t in saver.alist(config, limit=10)][-1]
        options = {"before": tenth.config}
    listed = [t async for t in saver.alist(config, **options)]
    alone = [await saver.aget_tuple(t.config) for t in listed]

    _same(listed, alone)
    assert len(listed) > 16  # more than a batch: the listing scanned
    ids = [(t.config["configurable"]["checkpoint_id"]) for t in listed]
    assert ids == sorted(ids, reverse=True)
    if config is None:
        assert len(listed) == 2 * (STEPS + 2)
    assert any(t.pending_writes for t in listed)
    assert any(t.checkpoint["channel_values"].get("big") == BIG for t in listed)


async def test_the_sync_listing_is_the_async_one(nats_url: str, saver: JetStreamSaver) -> None:
    with JetStreamSaver.from_conn_string(nats_url, bucket=saver.bucket) as other:
        listed = list(other.list(_thread("one")))
    _same(listed, [t async for t in saver.alist(_thread("one"))])


@pytest.mark.parametrize("direct", [True, False], ids=["direct gets", "no direct gets"])
async def test_a_scan_pages_past_a_batch_and_leaves_deleted_keys_out(
    nats_url: str, direct: bool
) -> None:
    """1,500 keys (a batch is 1,000), two of them deleted, beside another thread's."""
    bucket = f"lgs{uuid.uuid4().hex[:10]}"
    async with raw_connection(nats_url) as raw:
        kv = await raw.js.create_key_value(bucket=bucket, history=1, direct=direct)
        await raw.js.create_object_store(f"{bucket}-blobs")
        await asyncio.gather(*(kv.put(f"t.v.{n}", f"value {n}".encode()) for n in range(1500)))
        await kv.put("u.v.1", b"another thread's")
        await kv.delete("t.v.7")
        await kv.purge("t.v.8")
        nc = await connect(NatsConfig(url=nats_url))
        try:
            scanning = SaverBucket(nc, bucket)
            await scanning.open()
            found = await scanning.scan("t.>")
        finally:
            await close(nc)
            for stream in (f"KV_{bucket}", f"OBJ_{bucket}-blobs"):
                await raw.js.delete_stream(stream)

    expected = {f"t.v.{n}": f"value {n}".encode() for n in range(1500) if n not in (7, 8)}
    assert found == expected
