"""The retention sweep: finished tasks past their retention, their graphs' threads, and
blobs nothing refers to.

Run by `tether gc` (from cron, a Kubernetes CronJob, or by hand). It is safe to run
while workers run and to run twice at once: it removes only finished tasks, a graph's
thread only with the last task that ran on it, and a blob only when no record or
checkpoint kept refers to it and it is past the grace period (see
`tether.tasks.retention`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from tether.clock import utcnow
from tether.deploys.forgetting import unused_builds
from tether.nats.blobs import BLOB_GRACE
from tether.nats.cleanup import Cleanup
from tether.nats.store import Store
from tether.schemas.codec import record_decoder
from tether.schemas.sessions import SessionState
from tether.tasks.retention import (
    DEFAULT_RETENTION,
    expired,
    garbage,
    graph_threads,
    session_expired,
    session_runs,
    tasks_on,
    thread_memo,
)
from tether.tasks.retention import referenced_blobs as refs_in

session_decoder = msgspec.json.Decoder(SessionState)
LANGGRAPH = "tether.integrations.langgraph.saver"
"""What removing a graph's thread loads (the `langgraph` extra): only when there is one."""


@dataclass
class SweepReport:
    """What a sweep removed (or, with `dry_run`, would remove)."""

    tasks: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    builds: list[str] = field(default_factory=list)
    """Builds announced over `retention` ago that no worker runs, no unfinished task
    started on, and where no new task goes (see `tether builds`)."""
    sessions: list[str] = field(default_factory=list)
    """Sessions whose last run finished over `retention` ago, nothing waiting: removed
    with all their runs (which the others keep, however old: each continues the last)."""
    kept_tasks: int = 0
    kept_blobs: int = 0
    threads: list[str] = field(default_factory=list)
    """Graphs' threads (`Names.graphs_bucket`) that only removed tasks ran on: removed
    with them, keys and blobs."""
    needs_langgraph: list[str] = field(default_factory=list)
    """Finished tasks kept (and counted in `kept_tasks`) because their graphs' threads
    can be removed only where the `langgraph` extra is installed."""


@dataclass
class _Read:
    """What the sweep read of the records and checkpoints."""

    graphs: bool
    """Whether the installation has a graphs bucket: else no thread is looked for."""
    referenced: set[str] = field(default_factory=set)
    started_on: set[str | None] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)
    memos: dict[str, set[str]] = field(default_factory=dict)
    """The threads each follow-up of a graph ran on (task id -> threads)."""
    removed_refs: dict[str, set[str]] = field(default_factory=dict)
    """The blobs each expired task's record and checkpoints refer to, should it be kept
    after all (a session's run, a graph's)."""


class Sweeper:
    def __init__(self, store: Store) -> None:
        self._cleanup = Cleanup(store)
        self._names = store.names
        self._store = store

    async def sweep(
        self,
        retention: timedelta = DEFAULT_RETENTION,
        grace: timedelta = BLOB_GRACE,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> SweepReport:
        now = now or utcnow()
        report = SweepReport()
        cleanup = self._cleanup
        # Blobs are listed first: one stored after this point is not considered at all.
        blobs = [found async for found in cleanup.stored_blobs()]
        read = _Read(graphs=await cleanup.has_graphs())
        await self._read_records(read, report, now, retention)
        await self._read_sessions(read, report)
        await self._read_checkpoints(read, set(report.tasks))
        if read.graphs:
            await self._find_threads(read, report)
        report.blobs = garbage(blobs, read.referenced, now, grace)
        report.kept_blobs = len(blobs) - len(report.blobs)
        report.builds = await unused_builds(self._store.workers, read.started_on, now - retention)
        if not dry_run:
            await self._remove(report, now - retention)
        return report

    async def _read_records(
        self, read: _Read, report: SweepReport, now: datetime, retention: timedelta
    ) -> None:
        async for task_id, value in self._cleanup.values(self._names.tasks_bucket):
            record = record_decoder.decode(value)
            if not record.status.is_terminal:
                read.started_on.add(record.build)
            if expired(record, now, retention):
                report.tasks.append(task_id)
                read.removed_refs[task_id] = refs_in(value)
            else:
                report.kept_tasks += 1
                read.referenced |= refs_in(value)
                if read.graphs:
                    read.kept.add(task_id)

    async def _read_sessions(self, read: _Read, report: SweepReport) -> None:
        expired = set(report.tasks)
        async for session_id, value in self._cleanup.values(self._names.sessions_bucket):
            state = session_decoder.decode(value)
            if session_expired(session_id, state, expired):
                report.sessions.append(session_id)
                continue
            kept = set(session_runs(session_id, state)) & expired
            report.tasks = [task_id for task_id in report.tasks if task_id not in kept]
            report.kept_tasks += len(kept)
            for task_id in kept:
                read.kept.add(task_id)
                read.referenced |= read.removed_refs.pop(task_id, set())

    async def _read_checkpoints(self, read: _Read, gone: set[str]) -> None:
        async for key, value in self._cleanup.values(self._names.checkpoints_bucket):
            task_id = key.split(".", 1)[0]
            if read.graphs and thread_memo(key):
                read.memos.setdefault(task_id, set()).update(_thread(value))
            if task_id not in gone:
                read.referenced |= refs_in(value)
            else:
                read.removed_refs[task_id] |= refs_in(value)

    async def _find_threads(self, read: _Read, report: SweepReport) -> None:
        """The threads to remove with the tasks; without LangGraph to remove them, the
        tasks that ran on them are kept instead (never a thread left with no task)."""
        candidates = graph_threads(report.tasks, read.kept, read.memos)
        threads = await self._cleanup.stored_threads(candidates)
        if not threads or _langgraph_installed():
            report.threads = threads
            return
        kept = tasks_on(threads, report.tasks, read.memos)
        report.tasks = [task_id for task_id in report.tasks if task_id not in kept]
        report.kept_tasks += len(kept)
        report.needs_langgraph = sorted(kept)
        for task_id in kept:
            read.referenced |= read.removed_refs.get(task_id, set())

    async def _remove(self, report: SweepReport, cutoff: datetime) -> None:
        cleanup = self._cleanup
        for build in report.builds:
            await self._store.workers.forget_build(build)
        # Sessions before their runs: a sweep cut off in between finds the runs again.
        for session_id in report.sessions:
            await self._store.sessions.forget(session_id)
        # A thread written since the cutoff has a follow-up running on it (begun after
        # the checkpoints were read): kept, as that follow-up's memo will keep it.
        busy = await cleanup.written_since(report.threads, cutoff) if report.threads else set()
        report.threads = [thread for thread in report.threads if thread not in busy]
        # Threads before their tasks: a sweep cut off in between finds the tasks again.
        if report.threads:  # by LangGraph's saver: ImportError without the extra
            from tether.integrations.langgraph.graph_saver import remove_threads

            await remove_threads(self._store, report.threads)
        for task_id in report.tasks:
            await cleanup.remove_task(task_id)
        for digest in report.blobs:
            await cleanup.remove_blob(digest)


def _thread(memo: bytes) -> set[str]:
    try:
        return {msgspec.json.decode(memo, type=str)}
    except msgspec.DecodeError:  # not a memo of ours: names no thread
        return set()


def _langgraph_installed() -> bool:
    try:
        importlib.import_module(LANGGRAPH)
    except ImportError:
        return False
    return True
