"""Graphs' threads as the sweep and the names see them: which threads go with which
removed tasks, and the names Tether and the saver each build, kept equal."""

from __future__ import annotations

from nats.js.api import StorageType

from tether.integrations.langgraph import keys
from tether.integrations.langgraph.bucket import blobs_bucket
from tether.integrations.langgraph.graph_input import THREAD_MEMO
from tether.integrations.langgraph.graph_saver import bucket_of
from tether.nats.layout import Layout, graph_bucket_configs, graph_streams
from tether.schemas.names import Names
from tether.tasks.retention import (
    GRAPH_THREAD_MEMO,
    graph_threads,
    tasks_on,
    thread_memo,
)

ACME = Names(prefix="acme")


def test_a_thread_goes_with_the_last_task_that_ran_on_it() -> None:
    memos = {"b": {"a"}, "c": {"a"}}  # b and c continued a's thread
    assert graph_threads(removed=["a"], kept=["b", "c"], memos=memos) == []
    assert graph_threads(removed=["a", "b"], kept=["c"], memos=memos) == ["b"]  # if b has one
    assert graph_threads(removed=["b", "c"], kept=[], memos=memos) == ["a", "b", "c"]
    assert graph_threads(removed=["x", "a"], kept=["b"], memos=memos) == ["x"]


def test_a_task_runs_on_its_own_thread_and_on_the_one_it_continues() -> None:
    """A follow-up's later steps (another graph of the same task) use its own id."""
    memos = {"b": {"a"}}
    assert graph_threads(removed=["a"], kept=["b"], memos=memos) == []
    assert graph_threads(removed=["b"], kept=["a"], memos=memos) == ["b"]
    assert tasks_on(["a"], ["a", "b", "z"], memos) == {"a", "b"}
    assert tasks_on(["b"], ["a", "b"], memos) == {"b"}
    assert tasks_on([], ["a", "b"], memos) == set()


def test_a_follow_ups_thread_memo_is_recognised_by_its_key() -> None:
    assert GRAPH_THREAD_MEMO == THREAD_MEMO
    assert thread_memo(Names.once_key("t1", 0, THREAD_MEMO))
    assert thread_memo(Names.once_key("t1", 3, THREAD_MEMO, branch=2))
    assert not thread_memo(Names.once_key("t1", 0, "graph-start"))
    assert not thread_memo(Names.step_key("t1", 0))
    assert not thread_memo(THREAD_MEMO)


def test_tethers_names_of_the_graphs_bucket_are_the_savers() -> None:
    assert ACME.graphs_bucket == "acme-langgraph" == bucket_of("acme")
    assert ACME.graph_blobs_bucket == "acme-langgraph-blobs" == blobs_bucket(ACME.graphs_bucket)
    assert graph_streams(ACME) == ["KV_acme-langgraph", "OBJ_acme-langgraph-blobs"]
    for ns in ("", "child:1"):
        pointer = keys.latest("t1", ns)
        assert pointer.split(".")[:2] == Names.graph_thread_roots("t1").split(".")[:2]
        assert len(pointer.split(".")) == len(Names.graph_thread_roots("t1").split("."))
    assert keys.thread_keys("t1") == "t1.>"  # a task id is a key token as it is


def test_the_graphs_buckets_follow_the_installations_replicas() -> None:
    kv, store = graph_bucket_configs(Layout(names=ACME, replicas=3))
    assert (kv.bucket, kv.history, kv.replicas, kv.direct) == ("acme-langgraph", 1, 3, False)
    assert (store.bucket, store.replicas) == ("acme-langgraph-blobs", 3)
    assert kv.storage is StorageType.FILE and store.storage is StorageType.FILE
    assert graph_bucket_configs(Layout(names=ACME))[0].direct
