"""Every read a front end needs (API, gateway, dashboard, CLI, demo), in one place: they
import nothing else of the NATS seam but its connection settings, provisioning and the
embedded server."""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tether.client.handle import TaskHandle
from tether.clock import utcnow
from tether.errors import InvalidTaskError
from tether.nats.feeds import AllEvents, dead_letters, last_event, task_events, task_history
from tether.nats.store import Store
from tether.nats.tokens import last_text_sequence
from tether.schemas.events import AnyStatusEvent, StepRetrying
from tether.schemas.ids import InvalidNameError, validate_task_id
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.work import DeadLetter
from tether.schemas.workers import Heartbeat, ToolInfo, WorkerBeat
from tether.tasks import listing, stalls
from tether.tasks.forks import full_plan
from tether.tasks.stalls import Stall

LIVE_TOOLS_FOR = 1.0
"""Seconds a read of the live workers' tools is reused (a dashboard or gateway polls)."""


def connected(store: Store | None) -> Store:
    """The client's store, once it is connected."""
    if store is None:
        raise RuntimeError(
            "the client is not connected: use 'async with Client(...)' or await connect()"
        )
    return store


class Reads:
    """The read half of `Client`: tasks, their events and plans, workers and tools."""

    _store: Store | None
    _live: tuple[float, builtins.list[WorkerBeat]] | None = None
    _reading_live: asyncio.Future[builtins.list[WorkerBeat]] | None = None

    def _connected(self) -> Store:
        return connected(self._store)

    @property
    def prefix(self) -> str:
        """The prefix of every subject, stream and bucket this client uses."""
        return self._connected().names.prefix

    async def find(self, task_id: str) -> TaskRecord | None:
        """The task's record, or None when there is no such task."""
        found = await self._connected().records.get(task_id)
        return None if found is None else found.record

    def events(self, task_id: str, after: int = 0) -> AsyncIterator[tuple[AnyStatusEvent, int]]:
        """The task's status events after stream sequence `after`, each with its sequence
        (resume from the last one): history, then live, through NATS restarts, without
        end (`TaskHandle.events()` ends at the task's end)."""
        return task_events(self._connected(), task_id, after=after)

    async def history(self, task_id: str, limit: int = 10_000) -> builtins.list[AnyStatusEvent]:
        """The task's events so far (the latest `limit`), with no wait for more."""
        return await task_history(self._connected(), task_id, limit)

    async def last_event(self, task_id: str) -> AnyStatusEvent | None:
        return await last_event(self._connected(), task_id)

    async def heartbeat(self, task_id: str) -> Heartbeat | None:
        """The running step's heartbeat (its worker, progress and last beat)."""
        return await self._connected().heartbeats.get(task_id)

    async def plan(self, record: TaskRecord) -> builtins.list[StepSpec]:
        """Every step of the task, finished ones too (the record keeps only the rest)."""
        return await full_plan(self._connected(), record)

    async def tool(self, name: str) -> ToolInfo | None:
        return await self._connected().tools.get(name)

    async def tools(self) -> builtins.list[ToolInfo]:
        """Every tool a worker has advertised, by name."""
        return await self._connected().tools.list()

    async def served_tools(self) -> builtins.list[ToolInfo]:
        """The advertised tools some live worker serves now (the MCP gateway offers only
        these: a tool whose workers are all gone would take calls that never start)."""
        live = await self.live_tools()
        return [info for info in await self._connected().tools.list() if info.name in live]

    async def live_tools(self) -> set[str]:
        """The tools some worker that beats right now serves."""
        return {tool for worker in await self.live_workers() for tool in worker.tools}

    async def live_workers(self) -> builtins.list[WorkerBeat]:
        """The workers that beat lately: read at most once a second, and once for all
        the callers that ask while it is being read (a thousand submits at once make one
        read, not a thousand)."""
        now = time.monotonic()
        if self._live is not None and now - self._live[0] <= LIVE_TOOLS_FOR:
            return self._live[1]
        if self._reading_live is None or self._reading_live.done():
            self._reading_live = asyncio.ensure_future(self._connected().workers.list())
        reading = self._reading_live
        beats = await asyncio.shield(reading)
        self._live = (now, beats)
        return beats

    async def stall(self, record: TaskRecord) -> Stall | None:
        """Why the task is not moving, if it waits on something a person should hear of:
        a worker serving its next step's tool, the running step's silent worker, or the
        next attempt of a failed one."""
        if record.status is TaskStatus.RUNNING and record.awaiting is None:
            beats = await self.live_workers()
            heartbeat = await self.heartbeat(record.task_id)
            silent = stalls.silent_holder(record, heartbeat, beats, utcnow())
            if silent is not None:
                return silent
        missing = stalls.unserved(record, await self.live_tools())
        if missing:
            return stalls.worker_wait(record, missing)
        if record.status.is_terminal or record.status is TaskStatus.WAITING:
            return None
        last = await self.last_event(record.task_id)
        if isinstance(last, StepRetrying) and last.step == record.current_step:
            return stalls.retry_wait(last, utcnow())
        return None

    async def queued(self, task_id: str) -> Stall | None:
        """For a task with no record: its submission, if it still waits for a dispatcher."""
        store = self._connected()
        queued_at = await store.submissions.queued(task_id)
        if queued_at is None:
            return None
        return stalls.dispatcher_wait(task_id, queued_at, await self.dispatcher_running())

    async def dispatcher_running(self) -> bool:
        """Whether some dispatcher takes submissions (and fires timers) right now."""
        return await self._connected().submissions.dispatcher_running()

    async def backlog(self, tool: str) -> tuple[int, int, int] | None:
        """A tool's queue, steps in flight and redeliveries (None: never served)."""
        return await self._connected().tools.backlog(tool)

    async def workers(self) -> builtins.list[WorkerBeat]:
        """Every worker that beat lately, by id."""
        return await self._connected().workers.list()

    async def dead_letters(self, limit: int = 20) -> builtins.list[DeadLetter]:
        """The latest `limit` dead letters, oldest first."""
        return await dead_letters(self._connected(), limit)

    async def load_blob(self, ref: str) -> bytes:
        """A stored blob's bytes by its `sha256:` reference."""
        return await self._connected().blobs.load(ref)

    async def text_position(self, task_id: str) -> int:
        """The stream sequence of the task's latest streamed chunk (0: none): a follower
        that has read up to it has every piece of text written so far."""
        return await last_text_sequence(self._connected(), task_id)

    async def status_counts(self) -> dict[str, int]:
        """Tasks per status, every status present (zero when none), from the status
        index: one request, whatever the count."""
        store = self._connected()
        rows = listing.parse(await store.records.index_rows(), store.names.prefix)
        return listing.counts(row.status for row in rows)

    async def on_every_event(self, heard: Callable[[bytes], Any]) -> Callable[[], Awaitable[None]]:
        """Hear every task's status events as they happen (live only); returns the stop."""
        feed = AllEvents(self._connected(), heard)
        await feed.start()
        return feed.stop

    async def answers(self, subject: str, timeout: float) -> bool:
        """Whether anyone replies to a request on `subject` within `timeout` seconds."""
        return await self._connected().answers(subject, timeout)

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on an existing task, e.g. after a restart of the client."""
        try:
            validate_task_id(task_id)
        except InvalidNameError as exc:
            raise InvalidTaskError(str(exc)) from exc
        return TaskHandle(self._connected(), task_id)

    async def get(self, task_id: str) -> TaskRecord:
        return await self.handle(task_id).get()

    async def list(self, status: TaskStatus | str | None = None) -> list[TaskRecord]:
        """Tasks, oldest first, optionally only those with `status`."""
        wanted = None if status is None else TaskStatus(status)
        records = await self._connected().records.list()
        return sorted(
            (r for r in records if wanted is None or r.status is wanted), key=lambda r: r.created_at
        )

    async def list_page(
        self,
        status: TaskStatus | str | None = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
        newest_first: bool = False,
        after: tuple[int, str] | None = None,
    ) -> tuple[builtins.list[TaskRecord], bool]:
        """A page of tasks in creation order (or newest first), after the task `cursor`,
        and whether more may follow. Read from the status index, so the first page costs
        one request and `limit` record reads however many tasks the store holds.
        `after`: a position (`position_of`) instead of `cursor`, read from no record."""
        wanted = None if status is None else TaskStatus(status)
        store = self._connected()
        known: dict[str, TaskRecord] = {}
        if await store.records.index_is_empty():  # a store from before the index: read it all
            known = {record.task_id: record for record in await self.list(wanted)}
            rows = [
                listing.Row(listing.created_us(r.created_at), r.task_id, "") for r in known.values()
            ]
        else:
            subjects = await store.records.index_rows(wanted.value if wanted else None)
            rows = listing.parse(subjects, store.names.prefix)
        if newest_first:
            rows.reverse()
        if after is None and cursor is not None:
            after = await self._position(cursor)
        if after is not None:
            rows = listing.after(rows, after, reverse=newest_first)
        page: builtins.list[TaskRecord] = []
        for start in range(0, len(rows), limit):  # a page's records read at once
            chunk = [row.task_id for row in rows[start : start + limit]]
            for offset, record in enumerate(await self._records(chunk, known)):
                if record is None or (wanted is not None and record.status is not wanted):
                    continue  # a row the task has left (or a task gone): the record decides
                if not page or page[-1].task_id != record.task_id:
                    page.append(record)
                if len(page) == limit:
                    return page, start + offset + 1 < len(rows)
        return page, False

    async def _records(
        self, task_ids: builtins.list[str], known: dict[str, TaskRecord]
    ) -> builtins.list[TaskRecord | None]:
        async def record(task_id: str) -> TaskRecord | None:
            if task_id in known:
                return known[task_id]
            found = await self._connected().records.get(task_id)
            return None if found is None else found.record

        return [*await asyncio.gather(*(record(task_id) for task_id in task_ids))]

    async def _position(self, task_id: str) -> tuple[int, str]:
        """Where task `task_id` sits in creation order."""
        return position_of((await self._connected().records.require(task_id)).record)


def position_of(record: TaskRecord) -> tuple[int, str]:
    """Where a task sits in creation order (a `list_page` position)."""
    return listing.created_us(record.created_at), record.task_id
