"""A stopping worker's drain: it takes no new step and lets its running steps finish, so
a rolling deploy re-runs nothing; as its build's last worker of a tool it also takes the
steps routed to its build until none is left (pinned tasks have nowhere else to go).

A step pinned to its build may still be on its tool's shared subject: published while
one build served the tool (nothing is routed then), or taken by a fetch given up as the
drain began (it comes back after its ack wait). Where another build serves the tool, its
workers send such a step on to this build; so the last worker also waits until the
shared subject holds nothing stored before its drain began, for as long as such a step
takes to come back (`shared_wait`): one retried later (a tool's backoff) is no reason
to keep the drain going, and if pinned here it waits, moves or fails as its tool says.

The drain is the host's (how a worker stops); who is its build's last worker is the
fleet's to say (`tether.deploys.fleet`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping

from tether.deploys.fleet import FleetView
from tether.nats.store import Store
from tether.tools.tool import Tool
from tether.worker.liveness import Liveness
from tether.worker.stopping import StopClock

log = logging.getLogger("tether.worker")
DRAIN_LOOK = 0.25
"""Seconds between looks, while draining, at the steps still routed to this build (and,
for a serving loop paused by the drain, at whether this worker became its build's last)."""


class Drain:
    """What a worker may still take once it is stopping, and its wait for what it must
    finish. Any step it took while draining would be cut short, and run twice, should the
    drain time out; so it takes one only where no other worker would: from its build's
    subject of a tool no other worker of its build that is not draining serves."""

    def __init__(self, build: str, tools: Collection[str], shared_wait: float = 10.0) -> None:
        self.started = asyncio.Event()
        """Set first on any stop: nothing new is taken but as `takes` says."""
        self._build = build
        self._tools = tools
        self._shared_wait = shared_wait
        """Seconds the drain waits for its tools' shared subjects (see the module)."""
        self._store: Store | None = None
        self._fleet: FleetView | None = None

    def follow(self, store: Store, fleet: FleetView) -> None:
        """Judge who is its build's last worker by `fleet` (this worker's own beat in it
        says it drains as soon as the drain starts: `Worker.stop`)."""
        self._store, self._fleet = store, fleet

    def takes(self, tool: str | None = None) -> bool:
        """Whether a new message may be taken now: any before the drain; during it, only
        one of `tool`'s routed to this build, as the last worker of its build serving
        `tool` (None: the tool's shared subject, which other builds' workers take)."""
        if not self.started.is_set():
            return True
        return tool is not None and self._last_of_build(tool)

    def _last_of_build(self, tool: str) -> bool:
        if self._fleet is None:
            return True  # no view of the fleet: as if alone, so no routed step is left behind
        return not self._fleet.fleet.takes_new(tool, self._build)

    async def run(
        self, clock: StopClock, busy: Callable[[], bool], lost: Callable[[], bool]
    ) -> None:
        """Wait (`wait`) until the clock runs out."""
        waiting = asyncio.ensure_future(self.wait(busy, lost))
        for left in await clock.wait({waiting}):
            left.cancel()

    async def wait(self, busy: Callable[[], bool], lost: Callable[[], bool]) -> None:
        """Wait while this worker runs steps (`busy`) or, as its build's last worker of
        some tool, steps of that tool routed to its build wait (or may be on their way)."""
        quiet = 0
        since: int | None = None  # the work stream's last message as the drain began
        until = time.monotonic() + self._shared_wait
        while quiet < 2 and not lost():
            if since is None and self._store is not None:
                with contextlib.suppress(Exception):  # NATS away: read it at the next look
                    since = await self._store.work_sequence()
            await asyncio.sleep(DRAIN_LOOK)
            if busy():
                quiet = 0
            elif not any(self._last_of_build(tool) for tool in self._tools):
                return  # others of its build take what is routed to it
            elif await self._nothing_routed_here(since, shared=time.monotonic() < until):
                quiet += 1
            else:
                quiet = 0

    async def _nothing_routed_here(self, since: int | None, shared: bool) -> bool:
        store = self._store
        if store is None:
            return True
        last = [tool for tool in self._tools if self._last_of_build(tool)]
        try:
            routed = await store.routed_steps()
            if any(build == self._build and tool in last for tool, build in routed):
                return False
            for tool in self._sent_on_by_others(last) if shared else []:
                if since is None or not await store.shared_steps_handled(tool, since):
                    return False
        except Exception as exc:  # NATS away: look again
            log.debug("no look at the steps routed here: %s", exc)
            return False
        return True

    def _sent_on_by_others(self, tools: list[str]) -> list[str]:
        """Of `tools`, those another build's workers take new steps of (so they send on
        what they find pinned here); with none, what waits on the shared subject waits
        for the next worker of the tool, whichever build it is."""
        if self._fleet is None:
            return []
        fleet = self._fleet.fleet
        return [tool for tool in tools if fleet.current(tool) not in (None, self._build)]


def back_within(liveness: Liveness, tools: Mapping[str, Tool]) -> float:
    """Seconds within which a step stored on a shared subject before a drain comes back:
    its ack wait (taken by a fetch given up as the drain began), or a second (a claim
    that could not be made, put back), and two looks."""
    waits = [liveness.ack_wait(tool.heartbeat).total_seconds() for tool in tools.values()]
    return max(waits, default=0.0) + 1.0 + 2 * DRAIN_LOOK


def say_stopping(worker_id: str, running: int, drain: float | None, grace: float) -> None:
    if drain is not None:
        log.info(
            "draining worker %s: it takes no new step and exits when its %d running "
            "step(s) finish, within %.0f s (a second Ctrl-C or SIGTERM stops it now)",
            worker_id,
            running,
            drain,
        )
    elif running:
        log.info(
            "stopping worker %s: %d step(s) running get %.1f s to finish, then go back "
            "to their queues",
            worker_id,
            running,
            grace,
        )


def say_ran_out(worker_id: str, drain: float, running: int) -> None:
    log.warning(
        "the drain of worker %s ran out of its %.0f s: %d step(s) still running go back to "
        "their queues and run again on another worker (a longer --drain-timeout lets them "
        "finish)",
        worker_id,
        drain,
        running,
    )
