"""A worker's part in a deploy: it announces its build, keeps the view of the fleet its
hand-offs are routed by (`tether.worker.routing`), sends on the steps left on builds
whose workers are all gone, and, draining, stays until the steps routed to its build
are done, so a rolling deploy loses nothing and re-runs nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from tether.clock import utcnow
from tether.nats.consumers import ConsumerOptions
from tether.nats.delivery import Consumer
from tether.nats.store import Store
from tether.schemas.tasks import WorkerBeat
from tether.worker.app import Tool
from tether.worker.builds import build_info
from tether.worker.fleet import FleetView
from tether.worker.liveness import Liveness
from tether.worker.step import StepRunner

log = logging.getLogger("tether.worker")
MOVE_EVERY = 1.0
"""Seconds between looks for steps left on a build whose workers are all gone."""
LOOK_AGAIN = 10.0
"""Seconds before the steps left on a gone build are looked at again when nothing in the
fleet changed (each look puts back those that must stay: a message each)."""
MOVE_AT_ONCE = 64
MOVE_WAIT = 0.25
"""Seconds a look waits for the steps of a gone build's consumer."""
ANY_LEFT = ("*", "*")
"""The key in `Rollout._looked` of the last look at the subjects that found no step left
on a gone build."""
DRAIN_LOOK = 0.25
"""Seconds between looks, while draining, at the steps still routed to this build."""


class Rollout:
    def __init__(
        self,
        store: Store,
        build: str,
        tools: dict[str, Tool],
        options: Callable[[Tool], ConsumerOptions],
        liveness: Liveness | None = None,
    ) -> None:
        self._store = store
        self._build = build
        self._tools = tools
        self._options = options
        self.fleet = FleetView(store.workers, liveness)
        self._gone: dict[tuple[str, str], Consumer] = {}
        self._looked: dict[tuple[str, str], tuple[int, datetime]] = {}
        """(tool, build), or `ANY_LEFT` → the fleet's version and the time of the last
        look."""

    async def start(self, key: str, beat: WorkerBeat) -> None:
        """Follow the fleet, then announce this build with its tools' shapes, saying how
        they do not fit the build before it (steps whose input that build made will
        not move here)."""
        await self.fleet.start()
        known = await self._store.workers.builds()
        info = build_info(self._build, self._tools.values(), known, utcnow())
        await self._store.workers.announce_build(info)
        self.fleet.know(key, beat, info)  # routes with itself in the fleet from the start
        for tool, changes in info.changes.items():
            if tool in self._tools:
                log.warning(
                    "tool %r of build %s does not fit build %s: %s. Steps whose input %s "
                    "made stay on it (pinned tasks never move here); keep changes "
                    "compatible (new fields optional, none removed or retyped) to let "
                    "them move",
                    tool,
                    self._build,
                    info.before,
                    "; ".join(changes),
                    info.before,
                )

    async def stop(self) -> None:
        await self.fleet.stop()

    async def move_left_steps(
        self, runner: StepRunner, stopping: asyncio.Event, draining: asyncio.Event
    ) -> None:
        """Send on the steps left on a build no worker runs any more (`StepRunner.move`):
        one request a round while some are left, none while every build this worker
        knows of is up, and between, one when the fleet changes or `LOOK_AGAIN` passes
        (a build gone until `tether gc` forgets it costs no request a second)."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), MOVE_EVERY)
            if draining.is_set() or not self._some_build_gone() or not self._due(*ANY_LEFT):
                continue
            again = True
            try:
                left = [
                    (self._tools[name], build)
                    for name, build in await self._store.routed_steps()
                    if name in self._tools and self._is_gone(name, build)
                ]
                again = bool(left)
                for tool, build in left:
                    if self._due(tool.name, build):
                        await self._move_from(runner, tool, build)
            except Exception as exc:  # NATS away: the next round tries again
                log.debug("no look at the steps left on builds gone: %s", exc)
            if again:  # some are left (more may come), or no look: again next round
                self._looked.pop(ANY_LEFT, None)

    def _due(self, tool: str, build: str) -> bool:
        """Look again when the fleet changed, when a pinned step's grace on the gone
        build ended since the last look, or `LOOK_AGAIN` after it."""
        now, last = utcnow(), self._looked.get((tool, build))
        if last is not None and last[0] == self.fleet.version:
            ends = self._grace_ends(tool, build)
            recent = now - last[1] < timedelta(seconds=LOOK_AGAIN)
            if recent and not (ends is not None and last[1] < ends <= now):
                return False
        self._looked[(tool, build)] = (self.fleet.version, now)
        return True

    def _grace_ends(self, tool: str, build: str) -> datetime | None:
        fleet = self.fleet.fleet
        gone = fleet.gone_since.get((tool, build))
        return None if gone is None else gone + timedelta(seconds=fleet.shape(tool, build).grace_s)

    def _is_gone(self, tool: str, build: str) -> bool:
        return build != self._build and build not in self.fleet.fleet.serving.get(tool, {})

    def _some_build_gone(self) -> bool:
        """Whether another build served a tool here and serves it no more."""
        gone = self.fleet.fleet.gone_since
        return any(tool in self._tools and build != self._build for tool, build in gone)

    async def _move_from(self, runner: StepRunner, tool: Tool, build: str) -> None:
        consumer = self._gone.get((tool.name, build))
        if consumer is None:
            consumer = await self._store.tool_consumer(tool.name, self._options(tool), build)
            self._gone[(tool.name, build)] = consumer
        for delivery in await consumer.fetch(MOVE_AT_ONCE, MOVE_WAIT):
            await runner.move(delivery, build)

    async def drain(self, busy: Callable[[], bool], lost: Callable[[], bool]) -> None:
        """Wait while this worker runs steps (`busy`) or steps routed to its build wait,
        unless another worker of its build that is not draining serves every tool here:
        the steps of tasks pinned to it finish here."""
        quiet = 0
        while quiet < 2 and not lost():
            await asyncio.sleep(DRAIN_LOOK)
            if busy():
                quiet = 0
            elif self._others_of_my_build():
                return
            elif await self._nothing_routed_here():
                quiet += 1
            else:
                quiet = 0

    def _others_of_my_build(self) -> bool:
        serving = self.fleet.fleet.serving
        return all(serving.get(tool, {}).get(self._build) for tool in self._tools)

    async def _nothing_routed_here(self) -> bool:
        try:
            routed = await self._store.routed_steps()
        except Exception as exc:  # NATS away: look again
            log.debug("no look at the steps routed here: %s", exc)
            return False
        return not any(build == self._build and tool in self._tools for tool, build in routed)
