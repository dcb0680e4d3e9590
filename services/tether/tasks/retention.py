"""What the retention sweep removes: pure decisions, no I/O.

A finished task is kept for a retention period (its record, checkpoints and events),
then removed. A blob is removed once nothing kept refers to it, and only when it is
older than a grace period: a task may be about to write its first reference to a blob
it just stored (or found stored), and the sweep must not see that as garbage. A graph's
thread (LangGraph, `Names.graphs_bucket`) goes with the last task that ran on it. A
session's runs continue each other by reference, so they go together, with the session,
once its last run finished more than the retention ago and nothing waits in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from tether.nats.blobs import BLOB_GRACE as BLOB_GRACE  # the blob store's rule
from tether.schemas.names import Names
from tether.schemas.records import TaskRecord
from tether.schemas.sessions import SessionState

DEFAULT_RETENTION = timedelta(days=7)
"""As long as the status stream keeps a task's events."""

_REF = re.compile(rb'"\$blob":\s*"sha256:([0-9a-f]{64})"')


def expired(record: TaskRecord, now: datetime, retention: timedelta) -> bool:
    """Whether a task finished more than `retention` ago."""
    return record.status.is_terminal and now - record.updated_at > retention


def session_runs(session_id: str, state: SessionState) -> list[str]:
    """The tasks of every run the session started, first to last."""
    return [Names.run_task_id(session_id, run) for run in range(1, state.runs + 1)]


def session_expired(session_id: str, state: SessionState, expired_tasks: set[str]) -> bool:
    """Whether a session goes: no run under way, nothing waiting, and its last run
    finished more than the retention ago (`expired_tasks`) or is gone already."""
    if state.current is not None or state.queued or state.carried or state.inputs:
        return False
    runs = session_runs(session_id, state)
    return not runs or runs[-1] in expired_tasks


def referenced_blobs(data: bytes) -> set[str]:
    """The hex digests of every blob reference in encoded JSON, at any depth."""
    return {match.decode() for match in _REF.findall(data)}


def garbage(
    blobs: Iterable[tuple[str, datetime]],
    referenced: set[str],
    now: datetime,
    grace: timedelta = BLOB_GRACE,
) -> list[str]:
    """The digests among `blobs` (digest, stored at) that nothing refers to and that
    are past the grace period."""
    return [
        digest
        for digest, stored_at in blobs
        if digest not in referenced and now - stored_at > grace
    ]


GRAPH_THREAD_MEMO = "graph-thread"
"""The memo in which a graph's follow-up keeps the thread it runs on, its first task's
(`tether.integrations.langgraph.graph_input.THREAD_MEMO`, named here so that the sweep
loads no LangGraph: a unit test keeps the two equal)."""


def thread_memo(key: str) -> bool:
    """Whether a key of the checkpoints bucket is a graph follow-up's thread memo
    (`<task>.<step>.once.graph-thread`: `Names.once_key`)."""
    return key.rsplit(".", 2)[1:] == ["once", GRAPH_THREAD_MEMO]


def graph_threads(
    removed: Iterable[str], kept: Iterable[str], memos: Mapping[str, set[str]]
) -> list[str]:
    """The graph threads that only `removed` tasks ran on, to remove with them. A task
    runs on the thread of its own id and, a follow-up, on the one its memo names (`memos`:
    task id -> threads): a thread that a kept task runs on stays (its follow-up does)."""
    staying = _threads_of(kept, memos)
    return sorted(_threads_of(removed, memos) - staying)


def tasks_on(
    threads: Iterable[str], tasks: Iterable[str], memos: Mapping[str, set[str]]
) -> set[str]:
    """The tasks among `tasks` that ran on any of `threads`."""
    wanted = set(threads)
    return {task for task in tasks if _threads_of([task], memos) & wanted}


def _threads_of(tasks: Iterable[str], memos: Mapping[str, set[str]]) -> set[str]:
    found: set[str] = set()
    for task in tasks:
        found.add(task)
        found |= memos.get(task, set())
    return found
