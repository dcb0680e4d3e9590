"""A worker's part in a deploy: it announces its build, keeps the view of the fleet its
hand-offs are routed by (`tether.deploys.routing`), sends on the steps left on builds
whose workers are all gone (a drain is the host's: `tether.worker.draining`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

from tether.clock import utcnow
from tether.deploys.announcing import announce_build
from tether.deploys.fleet import FleetView
from tether.deploys.served import ServedTool
from tether.errors import NatsUnavailableError
from tether.nats.consumers import ConsumerOptions
from tether.nats.delivery import Consumer, Delivery
from tether.nats.store import Store
from tether.schemas.workers import WorkerBeat

log = logging.getLogger("tether.worker")
MOVE_EVERY = 1.0
"""Seconds between looks for steps left on a build whose workers are all gone."""
LOOK_AGAIN = 10.0
"""Seconds before the steps left on a gone build are looked at again when nothing in the
fleet changed (each look puts back those that must stay: a message each)."""
MOVE_AT_ONCE = 64
MOVE_WAIT = 0.25
"""Seconds a look waits for the steps of a gone build's consumer."""
NUDGE = 0.05
"""Seconds a round waits past a grace's end, so that it finds the grace over."""
ANY_LEFT = ("*", "*")
"""The key in `Rollout._looked` of the last look at the subjects that found no step left
on a gone build."""
SETTLE = 5.0
"""Seconds after a gone build's grace ends during which its subjects are looked at every
round: a survivor hands a dead worker's held steps back onto them about when the build is
seen gone (perhaps just after a look that found none), and with a short grace, after it."""


class StepMover(Protocol):
    """What a rollout needs of the worker's step runner (`StepRunner.move`): send a step
    routed to `build`, of which no worker is left, where it may run now."""

    async def move(self, delivery: Delivery, build: str) -> None: ...


def _settling(end: datetime, last: datetime, now: datetime) -> bool:
    """Whether a grace that ends at `end` calls for a look `now`, the last at `last`."""
    return end <= now and (last < end or now - end < timedelta(seconds=SETTLE))


T = TypeVar("T", bound=ServedTool)
"""The worker's kind of tool (`tether.tools.Tool`), which its consumer options take."""


class Rollout(Generic[T]):
    def __init__(
        self,
        store: Store,
        build: str,
        tools: dict[str, T],
        options: Callable[[T], ConsumerOptions],
        dead_after: float,
    ) -> None:
        self._store = store
        self._build = build
        self._tools = tools
        self._options = options
        self.fleet = FleetView(store.workers, dead_after)
        self._gone: dict[tuple[str, str], Consumer] = {}
        self._looked: dict[tuple[str, str], tuple[int, datetime]] = {}
        """(tool, build), or `ANY_LEFT` → the fleet's count of changes and the time of the
        last look."""

    async def start(self, key: str, beat: WorkerBeat) -> None:
        """Announce this build with its tools' shapes (refused when it was announced with
        others: `announcing`), follow the fleet, and say how they do not fit the build
        before it (steps whose input that build made will not move here), loud only
        while something of that build is left (`_left_on`)."""
        info = await announce_build(
            self._store.workers, self._build, self._tools.values(), utcnow()
        )
        await self.fleet.start()
        self.fleet.know(key, beat, info)  # routes with itself in the fleet from the start
        changed = [tool for tool in info.changes if tool in self._tools]
        level = logging.WARNING if changed and await self._left_on(info.before) else logging.DEBUG
        for tool in changed:
            log.log(
                level,
                "tool %r of build %s does not fit build %s: %s. Steps whose input %s "
                "made stay on it (pinned tasks never move here); keep changes "
                "compatible (new fields optional, none removed or retyped) to let "
                "them move",
                tool,
                self._build,
                info.before,
                "; ".join(info.changes[tool]),
                info.before,
            )

    async def _left_on(self, build: str | None) -> bool:
        """Whether anything still runs on `build` or waits for it: a worker of it, or a
        step routed to it. Only then does a change that does not fit it matter; with
        nothing left (`tether dev` started again on changed code) it is a DEBUG line."""
        if build is None:
            return False
        if any(build in builds for builds in self.fleet.fleet.serving.values()):
            return True
        try:  # the fleet may not have heard every beat yet: read them
            if any(beat.build == build for beat in await self._store.workers.list()):
                return True
            routed = await self._store.routed_steps()
        except NatsUnavailableError:
            return True  # not known: said, as when something is left
        return any(count for (_, on), count in routed.items() if on == build)

    async def stop(self) -> None:
        await self.fleet.stop()

    async def move_left_steps(
        self, runner: StepMover, stopping: asyncio.Event, draining: asyncio.Event
    ) -> None:
        """Send on the steps left on a build no worker runs any more (`StepMover.move`):
        one request a round while some are left, none while every build this worker
        knows of is up, and between, one when the fleet changes, one a round from the
        moment a pinned step's grace ends for `SETTLE` (its steps move or fail then,
        wherever the dead worker's held steps were put back meanwhile), and one every
        `LOOK_AGAIN` (a build gone until `tether gc` forgets it costs no request a
        second)."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self._until_next_round())
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
        build (any, for `ANY_LEFT`) ended since the last look or less than `SETTLE`
        ago, or `LOOK_AGAIN` after it."""
        now, last = utcnow(), self._looked.get((tool, build))
        if last is not None and last[0] == self.fleet.changes:
            recent = now - last[1] < timedelta(seconds=LOOK_AGAIN)
            ends = self._grace_ends(tool, build)
            if recent and not any(_settling(end, last[1], now) for end in ends):
                return False
        self._looked[(tool, build)] = (self.fleet.changes, now)
        return True

    def _grace_ends(self, tool: str, build: str) -> list[datetime]:
        """When the grace of the pinned steps on a gone build ends (for `ANY_LEFT`: on
        each gone build of a tool served here)."""
        fleet = self.fleet.fleet
        gone = fleet.gone_since
        pairs = (
            [(tool, build)]
            if (tool, build) != ANY_LEFT
            else [pair for pair in gone if pair[0] in self._tools and pair[1] != self._build]
        )
        return [
            gone[pair] + timedelta(seconds=fleet.shape(*pair).grace_s)
            for pair in pairs
            if pair in gone
        ]

    def _until_next_round(self) -> float:
        """`MOVE_EVERY`, or less, to look just as a grace ends (its steps move then)."""
        now = utcnow()
        ends = [(end - now).total_seconds() for end in self._grace_ends(*ANY_LEFT) if end > now]
        return min([MOVE_EVERY, *(seconds + NUDGE for seconds in ends)])

    def _is_gone(self, tool: str, build: str) -> bool:
        return build != self._build and build not in self.fleet.fleet.serving.get(tool, {})

    def _some_build_gone(self) -> bool:
        """Whether another build served a tool here and serves it no more."""
        gone = self.fleet.fleet.gone_since
        return any(tool in self._tools and build != self._build for tool, build in gone)

    async def _move_from(self, runner: StepMover, tool: T, build: str) -> None:
        consumer = self._gone.get((tool.name, build))
        if consumer is None:
            consumer = await self._store.tool_consumer(tool.name, self._options(tool), build)
            self._gone[(tool.name, build)] = consumer
        for delivery in await consumer.fetch(MOVE_AT_ONCE, MOVE_WAIT):
            await runner.move(delivery, build)
