"""`FleetView`: the builds this process knows of, kept current from the workers bucket
as it is written (beats, `BuildInfo`s, the `Deployment`), for `routing` to decide with."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from tether.clock import utcnow
from tether.deploys.routing import Fleet, Refuse, place, started_on
from tether.errors import NatsUnavailableError
from tether.nats.workers import Workers, is_worker_key
from tether.schemas.builds import BuildInfo, Deployment
from tether.schemas.names import Names
from tether.schemas.records import TaskRecord
from tether.schemas.work import WorkMessage
from tether.schemas.workers import WorkerBeat

log = logging.getLogger("tether.worker")
LOOK_EVERY = 0.25
"""Seconds between two summaries of the beats heard (who serves what)."""


def _serves(beat: WorkerBeat) -> tuple[str | None, list[str], bool, str | None]:
    return beat.build, beat.tools, beat.draining, beat.claimed_by


class FleetView:
    """Hears every worker's beat and the builds' entries (one core subscription, as
    `Succession`), and sums them up as a worker comes, goes or changes, and every
    `LOOK_EVERY`: a worker silent for `dead_after` no longer counts."""

    def __init__(self, workers: Workers, dead_after: float) -> None:
        self._workers = workers
        self._dead_after = dead_after
        """Seconds of silence after which a worker no longer counts (`Liveness.dead_after`)."""
        self._beats: dict[str, tuple[WorkerBeat, float]] = {}
        self._own: str | None = None
        """This process's worker: in its own view while it runs, however late its beats."""
        self.fleet = Fleet()
        self.changes = 0
        """Counts the changes of who serves what, the builds and the deployment."""
        self._stop: Callable[[], Awaitable[None]] | None = None
        self._looking: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._stop = await self._workers.follow(self._heard_beat, self._heard_build)
        try:
            await self._load()
        except NatsUnavailableError as exc:  # what is written from now on still comes
            log.warning("could not read the builds: %s", exc)
        self._sum_up()
        self._looking = asyncio.create_task(self._look())

    async def stop(self) -> None:
        if self._looking is not None:
            self._looking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._looking
        if self._stop is not None:
            await self._stop()

    async def _load(self) -> None:
        deployment, _ = await self._workers.deployment()
        self.fleet.deployment = deployment
        for info in await self._workers.builds():
            self.fleet.infos[info.build] = info
        now, since = time.monotonic(), utcnow().timestamp() - self._dead_after
        for key in filter(is_worker_key, await self._workers.keys("*")):
            beat = await self._workers.beat_of(key)
            if beat is not None and beat.time.timestamp() > since:
                self._beats.setdefault(key, (beat, now))

    def know(self, key: str, beat: WorkerBeat, info: BuildInfo | None = None) -> None:
        """This process's own worker, known at once (not when its beat comes back)."""
        self._own = key
        self._heard_beat(key, beat)
        if info is not None:
            self.fleet.infos[info.build] = info
            self.changes += 1
        self._sum_up()

    def _heard_beat(self, key: str, beat: WorkerBeat | None) -> None:
        before = self._beats.get(key)
        if beat is None or beat.claimed_by is not None:
            self._beats.pop(key, None)
        else:
            self._beats[key] = (beat, time.monotonic())
        was = before[0] if before is not None else None
        if beat is None or was is None or _serves(was) != _serves(beat):
            self._sum_up()  # a worker came, went or changed: route by it now, not next look

    def _heard_build(self, key: str, entry: BuildInfo | Deployment | None) -> None:
        self.changes += 1
        if isinstance(entry, Deployment):
            self.fleet.deployment = entry
        elif isinstance(entry, BuildInfo):
            self.fleet.infos[entry.build] = entry
        elif key == Names.DEPLOYMENT_KEY:
            self.fleet.deployment = Deployment()

    async def _look(self) -> None:
        while True:
            await asyncio.sleep(LOOK_EVERY)
            self._sum_up()

    def _sum_up(self) -> None:
        now = time.monotonic()
        serving: dict[str, dict[str, bool]] = {}
        for key, (beat, heard) in list(self._beats.items()):
            if now - heard > self._dead_after and key != self._own:
                del self._beats[key]
                continue
            build = beat.build
            if build is None:
                continue  # a worker that names no build takes only unrouted steps
            for tool in beat.tools:
                builds = serving.setdefault(tool, {})
                builds[build] = builds.get(build, False) or not beat.draining
        fleet = self.fleet
        live = {(tool, build) for tool, builds in serving.items() for build in builds}
        served = {(tool, info.build) for info in fleet.infos.values() for tool in info.tools}
        served |= {(tool, build) for tool, builds in fleet.serving.items() for build in builds}
        stamp = utcnow()  # gone since now, or since this view first missed it
        for pair in served - live:
            fleet.gone_since.setdefault(pair, stamp)
        for pair in live:
            fleet.gone_since.pop(pair, None)
        if serving != fleet.serving:
            self.changes += 1
        fleet.serving = serving

    def build_for(self, work: WorkMessage, record: TaskRecord | None) -> str | None:
        """Where a hand-off goes (None: any worker of the tool). A step that can run
        nowhere goes to any worker, which fails its task saying why."""
        placed = place(self.fleet, work, started_on(record), utcnow())
        return None if isinstance(placed, Refuse) else placed

    def placement(self, work: WorkMessage, record: TaskRecord) -> str | Refuse | None:
        return place(self.fleet, work, started_on(record), utcnow())
