"""Every read a front end needs (API, gateway, dashboard, CLI, demo), in one place: they
import nothing else of the NATS seam but its connection settings, provisioning and the
embedded server."""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from tether.client.remote import RemoteActions
from tether.clock import utcnow
from tether.errors import NotAllowedError
from tether.nats.connection import Refused, unless_refused
from tether.nats.feeds import AllEvents, dead_letters, last_event, task_events, task_history
from tether.nats.store import Store
from tether.nats.tokens import last_text_sequence
from tether.schemas.builds import BuildsReply, BuildsRequest, DeployRequest
from tether.schemas.events import AnyStatusEvent, StepRetrying
from tether.schemas.tasks import (
    DeadLetter,
    Heartbeat,
    StepSpec,
    TaskRecord,
    TaskStatus,
    ToolInfo,
    WorkerBeat,
)
from tether.tasks import builds, listing, stalls
from tether.tasks.forks import full_plan
from tether.tasks.known_tools import live_tools
from tether.tasks.retention import DEFAULT_RETENTION
from tether.tasks.stalls import Stall
from tether.tasks.sweep import Sweeper, SweepReport

LIVE_TOOLS_FOR = 1.0
"""Seconds a read of the live workers' tools is reused (a dashboard or gateway polls)."""


class Reads:
    """The read half of `Client`: tasks, their events and plans, workers and tools."""

    _store: Store | None
    act_through_api: bool = False
    _live: tuple[float, set[str]] | None = None
    _reading_live: asyncio.Future[set[str]] | None = None

    def _connected(self) -> Store:
        if self._store is None:
            raise RuntimeError(
                "the client is not connected: use 'async with Client(...)' or await connect()"
            )
        return self._store

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
        """The tools some worker that beats right now serves: read at most once a second,
        and once for all the callers that ask while it is being read (a thousand submits
        at once make one read, not a thousand)."""
        now = time.monotonic()
        if self._live is not None and now - self._live[0] <= LIVE_TOOLS_FOR:
            return self._live[1]
        if self._reading_live is None or self._reading_live.done():
            self._reading_live = asyncio.ensure_future(live_tools(self._connected()))
        reading = self._reading_live
        tools = await asyncio.shield(reading)
        self._live = (now, tools)
        return tools

    async def stall(self, record: TaskRecord) -> Stall | None:
        """Why the task is not moving, if it waits on something a person should hear of:
        a worker serving its next step's tool, or the next attempt of a failed one."""
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

    async def builds(self, request: BuildsRequest | None = None) -> BuildsReply:
        """The builds workers run, with their workers and steps; a request with an
        `action` changes where tasks go first (see `ramp`, `promote`, `rollback`)."""
        if request is None or request.action == "list" or not request.build:
            return await builds.builds(self._connected(), request)
        return await self._deploy(
            DeployRequest(action=request.action, build=request.build, percent=request.percent)
        )

    async def ramp(self, build: str, percent: float) -> BuildsReply:
        """Send `percent` % of new tasks (by task id) to `build`, the rest where they went."""
        return await self._deploy(DeployRequest(action="ramp", build=build, percent=percent))

    async def promote(self, build: str) -> BuildsReply:
        """Send every new task, and every moving step, to `build`."""
        return await self._deploy(DeployRequest(action="promote", build=build))

    async def rollback(self, build: str) -> BuildsReply:
        """Send new tasks and moving steps back to the build before `build`; tasks pinned
        to it stay on it while its workers run."""
        return await self._deploy(DeployRequest(action="rollback", build=build))

    async def _deploy(self, request: DeployRequest) -> BuildsReply:
        """The operator's change: asked of the API's `deploy` when acting through it, else
        written here; either way only the operator's NATS user is allowed it, and any
        other is refused at once (NotAllowedError), not after a timeout."""
        store = self._connected()
        if self.act_through_api:
            return await RemoteActions(store).deploy(request)
        change = BuildsRequest(action=request.action, build=request.build, percent=request.percent)
        subject = store.names.kv_subject(store.names.workers_bucket, store.names.DEPLOYMENT_KEY)
        try:
            return await unless_refused(store.nc, builds.builds(store, change), subject)
        except Refused as exc:
            raise NotAllowedError(subject, str(exc).removeprefix("nats: ")) from None

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

    async def sweep(
        self, retention: timedelta = DEFAULT_RETENTION, dry_run: bool = False
    ) -> SweepReport:
        """Remove finished tasks past `retention` and blobs nothing refers to."""
        return await Sweeper(self._connected()).sweep(retention, dry_run=dry_run)

    async def reindex(self) -> int:
        """Write the status index row of every task (for tasks from before the index)."""
        return await self._connected().records.reindex()
