"""`list()` of a thread's whole history (202 checkpoints: the input, 200 super-steps of
one node that counts and leaves a short note, the end) on `JetStreamSaver` and, when
`langgraph-checkpoint-sqlite` is installed, on LangGraph's SQLite saver: the median of
`--calls` sync listings, and of `get_tuple` for scale (issue 49 item 8).

    python -m tests.bench.langgraph_list [--calls 20] [--nats URL]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

from tether import NatsServer
from tether.integrations.langgraph import JetStreamSaver

THREAD: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
STEPS = 200


class Counting(TypedDict):
    count: int
    note: str


def build() -> StateGraph[Any]:
    """One node that counts and loops to itself until `STEPS`: small values, so the
    figures are the saver's reads, not the serializer's work on a growing state."""

    def count(state: Counting) -> dict[str, Any]:
        n = state["count"] + 1
        return {"count": n, "note": f"step {n}"}

    graph = StateGraph(Counting)
    graph.add_node("count", count)
    graph.add_edge(START, "count")
    graph.add_conditional_edges("count", lambda s: "count" if s["count"] < STEPS else END)
    return graph


def timed(call: Callable[[], object], calls: int) -> float:
    """The median of `calls` timings of `call`, in milliseconds."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def figures(saver: BaseCheckpointSaver[Any], calls: int) -> dict[str, float]:
    graph = build().compile(checkpointer=saver)
    graph.invoke({"count": 0, "note": ""}, {**THREAD, "recursion_limit": STEPS + 10})
    listed = len(list(saver.list(THREAD)))
    return {
        "checkpoints": listed,
        "list_ms": timed(lambda: list(saver.list(THREAD)), calls),
        "list_limit10_ms": timed(lambda: list(saver.list(THREAD, limit=10)), calls),
        "get_tuple_ms": timed(lambda: saver.get_tuple(THREAD), calls),
    }


@contextmanager
def nats_url(given: str | None) -> Iterator[str]:
    if given is not None:
        yield given
        return
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-lglist-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        yield server.url


def main(args: argparse.Namespace) -> None:
    with nats_url(args.nats) as url:
        with JetStreamSaver.from_conn_string(url, bucket=f"b-{uuid.uuid4().hex[:8]}") as saver:
            saver.setup()
            print("JetStreamSaver", figures(saver, args.calls))
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        print("SqliteSaver: pip install langgraph-checkpoint-sqlite to compare")
        return
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "lg.db", check_same_thread=False)
        print("SqliteSaver", figures(SqliteSaver(conn), args.calls))
        conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="timed calls; medians shown")
    parser.add_argument("--nats", default=None, help="a running server (default: its own)")
    main(parser.parse_args())
