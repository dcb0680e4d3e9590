"""`tether gc` and LangGraph graphs' threads: a worker makes the graphs' bucket on a graph's
first step; the sweep removes a thread, keys and blobs, with the last task that ran on it
(a follow-up runs on the thread of the task it continues, so that task's removal leaves
it); `--dry-run` says so; and gc works without the langgraph extra, keeping the tasks
whose threads it cannot remove."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import pytest
from nats.js.errors import NotFoundError

from tests.conftest import ROOT, MakeWorker, Raw
from tests.e2e.test_cli_ops import Run, finish, tether
from tether import Client, NatsConfig, Worker
from tether.clock import utcnow
from tether.integrations.langgraph import JetStreamSaver
from tether.nats.layout import graph_streams
from tether.nats.store import Store
from tether.tasks.sweep import Sweeper
from tether.testing.llm import ScriptedModel

PADDING = "x" * 140_000
"""Over the saver's inline limit (128 KiB): the thread's messages go to its blob store."""
WITHOUT_LANGGRAPH = (
    "import runpy, sys; sys.modules['langgraph'] = None; "
    "runpy.run_module('tether.cli', run_name='__main__', alter_sys=True)"
)
"""`tether` in a process where LangGraph cannot be imported, as without the extra."""


@pytest.fixture
async def lg_worker(make_worker: MakeWorker, model: ScriptedModel) -> Worker:
    from tests.apps.langgraph_agents import app

    return await make_worker(app)


async def _thread(store: Store, thread_id: str) -> list[str]:
    """The keys of a thread in the installation's graphs bucket."""
    names = store.names
    info = await store.js.stream_info(
        names.kv_stream(names.graphs_bucket),
        subjects_filter=names.kv_subject(names.graphs_bucket, f"{thread_id}.>"),
    )
    return list(info.state.subjects or {})


async def _blobs(store: Store) -> int:
    """How many messages the graphs' blob store holds."""
    info = await store.js.stream_info(f"OBJ_{store.names.graph_blobs_bucket}")
    return info.state.messages


async def _gc_without_langgraph(config: NatsConfig, *args: str) -> Run:
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-c", WITHOUT_LANGGRAPH, "gc", *args],
        *["--nats", config.url, "--prefix", config.names.prefix],
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return await finish(process)


async def test_gc_removes_a_removed_tasks_thread_with_its_blobs_and_a_dry_run_says_so(
    config: NatsConfig,
    client: Client,
    store: Store,
    raw: Raw,
    lg_worker: Worker,
    model: ScriptedModel,
) -> None:
    for stream in graph_streams(config.names):  # not made with the installation...
        with pytest.raises(NotFoundError):
            await raw.js.stream_info(stream)
    question = model.conversation({"content": "Padded."})
    handle = await client.submit_agent("lg_react", f"{question} {PADDING}")
    assert await handle.wait(timeout=30) == "Padded."
    for stream in graph_streams(config.names):  # ...but on a graph's first step
        assert (await raw.js.stream_info(stream)).config.name == stream
    assert await _thread(store, handle.task_id) and await _blobs(store) > 0

    dry = await tether(config, "gc", "--older-than", "0", "--dry-run")
    assert dry.code == 0, dry
    assert "would remove 1 graph thread(s) only those tasks ran on" in dry.out.splitlines()
    assert await _thread(store, handle.task_id)

    report = await Sweeper(store).sweep(retention=timedelta(0))
    assert report.threads == [handle.task_id] and handle.task_id in report.tasks
    assert await _thread(store, handle.task_id) == []
    assert await _blobs(store) == 0  # chunks and meta
    saver = JetStreamSaver(store.nc, bucket=config.names.graphs_bucket)
    assert await saver.aget_tuple({"configurable": {"thread_id": handle.task_id}}) is None


async def test_a_thread_stays_while_a_kept_follow_up_runs_on_it(
    client: Client, store: Store, lg_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "First."}, {"content": "Second."})
    first = await client.submit_agent("lg_react", question)
    assert await first.wait(timeout=30) == "First."
    follow = await client.continue_agent(first.task_id, "And then?")
    assert await follow.wait(timeout=30) == "Second."
    ended = [(await handle.get()).updated_at for handle in (first, follow)]
    now = ended[1] + timedelta(seconds=1)
    between = (ended[1] - ended[0]) / 2 + timedelta(seconds=1)  # the first past it, not the other

    report = await Sweeper(store).sweep(retention=between, now=now)
    assert report.tasks == [first.task_id] and report.threads == []
    assert await store.records.get(first.task_id) is None
    assert await _thread(store, first.task_id)  # the follow-up's thread too

    report = await Sweeper(store).sweep(retention=timedelta(0))
    assert report.tasks == [follow.task_id] and report.threads == [first.task_id]
    assert await _thread(store, first.task_id) == []


async def test_gc_without_the_langgraph_extra_keeps_the_tasks_whose_threads_it_cannot_remove(
    config: NatsConfig, client: Client, store: Store, lg_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Kept."})
    handle = await client.submit_agent("lg_react", question)
    assert await handle.wait(timeout=30) == "Kept."

    blocked = await _gc_without_langgraph(config, "--older-than", "0", "--json")
    assert blocked.code == 0, blocked
    report = blocked.json()
    assert report["needs_langgraph"] == [handle.task_id] and report["threads"] == []
    assert handle.task_id not in report["tasks"] and report["kept_tasks"] == 1
    assert await store.records.get(handle.task_id) is not None and await _thread(
        store, handle.task_id
    )
    said = await _gc_without_langgraph(config, "--older-than", "0", "--dry-run")
    assert "kept 1 finished task(s) whose graph threads only the langgraph extra" in said.out

    swept = await tether(config, "gc", "--older-than", "0", "--json")
    assert swept.code == 0, swept
    assert swept.json()["threads"] == [handle.task_id]
    assert (
        await store.records.get(handle.task_id) is None
        and await _thread(store, handle.task_id) == []
    )


async def test_gc_needs_no_langgraph_where_no_graph_ran(config: NatsConfig, client: Client) -> None:
    run = await _gc_without_langgraph(config, "--older-than", "0", "--json")
    assert run.code == 0, run
    assert run.json()["threads"] == [] and run.json()["needs_langgraph"] == []


async def test_a_thread_written_while_the_sweep_reads_is_kept_though_its_task_goes(
    config: NatsConfig, client: Client, store: Store, lg_worker: Worker, model: ScriptedModel
) -> None:
    """A follow-up that begins on an expired task's thread after the sweep read the
    checkpoints (its memo unseen) writes the thread: the sweep, checking again just
    before it removes, keeps the thread; the expired task itself goes."""
    from langgraph.checkpoint.base import empty_checkpoint

    question = model.conversation({"content": "First."})
    first = await client.submit_agent("lg_react", question)
    assert await first.wait(timeout=30) == "First."
    ended = (await first.get()).updated_at
    await asyncio.sleep(0.5)  # time apart: the thread's write is later than the task's end
    saver = JetStreamSaver(store.nc, bucket=config.names.graphs_bucket)
    thread = {"configurable": {"thread_id": first.task_id, "checkpoint_ns": ""}}
    await saver.aput(thread, empty_checkpoint(), {}, {})  # as a follow-up's run begins
    written = utcnow()
    cutoff = ended + (written - ended) / 2
    now = written + timedelta(seconds=1)

    report = await Sweeper(store).sweep(retention=now - cutoff, now=now)
    assert report.tasks == [first.task_id] and report.threads == []
    assert await store.records.get(first.task_id) is None
    assert await _thread(store, first.task_id)
