"""`Worker`: serve an App's tools from their JetStream consumers until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from tether.cancellation import raise_if_cancelled
from tether.clock import utcnow
from tether.deploys.naming import default_build, validate_build
from tether.deploys.rollout import Rollout
from tether.errors import DefinitionError, NatsUnavailableError
from tether.nats.connection import Connection, NatsConfig, close, connect, sleep_unless_reconnected
from tether.nats.consumers import ConsumerOptions
from tether.nats.delivery import Consumer, Delivery
from tether.nats.layout import Layout
from tether.nats.store import Store
from tether.nats.workers import worker_key
from tether.schemas.workers import ToolInfo, WorkerBeat
from tether.service import Service
from tether.tools.app import App
from tether.tools.spelling import did_you_mean
from tether.tools.tool import Tool
from tether.worker.custody import Custody
from tether.worker.draining import Drain, back_within, say_ran_out, say_stopping
from tether.worker.liveness import Liveness
from tether.worker.serving import FETCH_TIMEOUT, Fetching, Slots
from tether.worker.step import StepRunner
from tether.worker.stopping import StopClock
from tether.worker.succession import Succession

if TYPE_CHECKING:
    from tether.metrics import Metrics

log = logging.getLogger("tether.worker")

CANCEL_GRACE = 5.0
REPORT_EVERY = 5.0
"""Seconds between reads of the tools' consumer state, with metrics on (a request a tool)."""
UNLIMITED_IN_FLIGHT = 10_000
"""Max-ack-pending of a tool without `max_concurrency`: steps delivered, not yet held."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker(Service):
    """Runs the steps of every tool in `apps`, `concurrency` at a time per tool.

    ```python
    async with Worker(app, NatsConfig(url)):
        ...  # steps run until the block ends; then in-flight steps finish or are released
    ```
    """

    def __init__(
        self,
        apps: App | Sequence[App],
        nats: NatsConfig | None = None,
        *,
        concurrency: int = 32,
        layout: Layout | None = None,
        worker_id: str | None = None,
        shutdown_grace: timedelta = timedelta(seconds=2),
        drain: timedelta | None = None,
        metrics: Metrics | None = None,
        liveness: Liveness | None = None,
        build: str | None = None,
    ) -> None:
        self.tools: dict[str, Tool] = {}
        listed = [apps] if isinstance(apps, App) else list(apps)
        for app in listed:
            for name, tool in app.tools.items():
                if name in self.tools:
                    raise ValueError(f"tool {name!r} is registered by more than one app")
                self.tools[name] = tool
        if not self.tools:
            names = ", ".join(repr(app.name) for app in ([apps] if isinstance(apps, App) else apps))
            raise DefinitionError(
                f"app {names or '(none)'} has no tools: register some with @app.tool() or "
                "app.add(Agent(...)), or name the App that has them"
            )
        self.nats = nats or NatsConfig()
        self.layout = layout or Layout.for_config(self.nats)
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.shutdown_grace = shutdown_grace
        """On a stop (or a hurried drain), how long running steps get before they go back
        to their queues."""
        self.drain = drain
        """On a stop, drain for up to this long: take no new step, and let the running
        steps (and, as its build's last worker, those routed to its build) finish."""
        self.metrics = metrics
        self.liveness = liveness or Liveness()
        named = build or os.environ.get("TETHER_BUILD")
        self.build = (
            validate_build(named)
            if named
            else default_build([app.version for app in listed], self.tools.values())
        )
        """The build of the code this worker runs: `build`, `$TETHER_BUILD`, the apps'
        versions, or a hash of the tools it serves (see `tether.deploys.naming`)."""
        self._nc: Connection | None = None
        self._stopping = asyncio.Event()
        self._stop_clock: StopClock | None = None
        self._hurried = False
        self._drain = Drain(self.build, self.tools, back_within(self.liveness, self.tools))
        self._draining = self._drain.started
        """Set first on any stop: the loops of the tools' shared consumers end (a drain
        goes on taking the steps routed to its build as its last worker: `Drain`)."""
        self._loops: list[asyncio.Task[None]] = []
        self._build_loops: list[asyncio.Task[None]] = []
        self._rollout: Rollout[Tool] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._fetching = Fetching(concurrency, lambda: self.is_lost)
        self._started_at = utcnow()
        self._custody: Custody | None = None
        self._store: Store | None = None
        self._beating: asyncio.Task[None] | None = None
        self._succession: Succession | None = None
        self._beat_stored = -math.inf
        """When (monotonic) this worker's beat was last stored: one that cannot store its
        own judges no other worker dead (see `Succession`)."""

    async def start(self) -> None:
        self._nc = await connect(self.nats, self.connection_lost)
        store = await Store.open(self._nc, self.layout)
        self._store = store
        key = worker_key(self.worker_id)
        self._custody = Custody(store, key)
        self._rollout = Rollout(
            store, self.build, self.tools, self._options, self.liveness.dead_after
        )
        await self._rollout.start(key, self._beat())
        self._drain.follow(store, self._rollout.fleet)
        runner = StepRunner(
            store,
            self.tools,
            self.worker_id,
            random.Random(),
            self._custody,
            self.metrics,
            build=self.build,
            fleet=self._rollout.fleet,
        )
        await store.remember_records(runner.stop_task)
        held, stored = runner.held, lambda: self._beat_stored
        self._succession = Succession(store, key, self.liveness, held, stored)
        runner.lag = await self._succession.serve(self.nats)  # answers before it beats or holds
        consumers = {tool.name: await self._register(store, tool) for tool in self.tools.values()}
        if self.metrics is not None:
            self.metrics.attach(store)
        self._started_at = utcnow()
        with contextlib.suppress(NatsUnavailableError):  # NATS away: `_beats` tries again
            # Alive before it holds: a step held by a worker that never beat is handed on by none
            await self._announce(store)
        for tool in self.tools.values():
            # One set of slots per tool, for the steps any build may run and those
            # routed to this one.
            shared, own = consumers[tool.name]
            slots = Slots(self.concurrency)
            run = functools.partial(self._spawn, runner, slots)
            serving = self._fetching.serve(
                shared, tool.name, slots, self._draining, self._drain.takes, run
            )
            self._loops.append(asyncio.create_task(serving))
            routed = self._fetching.serve(
                own,
                tool.name,
                slots,
                self._stopping,
                functools.partial(self._drain.takes, tool.name),
                run,
            )
            self._build_loops.append(asyncio.create_task(routed))
        moving = self._rollout.move_left_steps(runner, self._stopping, self._draining)
        self._loops.append(asyncio.create_task(moving))

        await self._succession.start()
        self._beating = asyncio.create_task(self._announcing(store))
        self._loops.append(asyncio.create_task(self._report(consumers)))
        self._loops.append(asyncio.create_task(self._look(runner)))
        log.info(
            "worker %s (build %s) serving %s", self.worker_id, self.build, ", ".join(self.tools)
        )

    def _options(self, tool: Tool) -> ConsumerOptions:
        return ConsumerOptions(
            ack_wait=self.liveness.ack_wait(tool.heartbeat),
            max_ack_pending=tool.max_concurrency or UNLIMITED_IN_FLIGHT,
        )

    async def _register(self, store: Store, tool: Tool) -> tuple[Consumer, Consumer]:
        """The tool's shared consumer and its build's; the tool advertised."""
        options = self._options(tool)
        consumer = await store.tool_consumer(tool.name, options)
        own = await store.tool_consumer(tool.name, options, self.build)
        await self._check_calls(store, tool)
        info = ToolInfo(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema(),
            output_schema=tool.output_schema,
            agent=tool.agent,
            max_concurrency=tool.max_concurrency,
            approval=tool.approval,
            build=self.build,
            updated_at=utcnow(),
        )
        await store.tools.register(info)
        return consumer, own

    async def _check_calls(self, store: Store, tool: Tool) -> None:
        """Warn about the tools an agent lists that no worker has registered (a typo
        would otherwise show only as its turns waiting), naming a close one."""
        missing = [n for n in tool.calls if n not in self.tools]
        missing = [n for n in missing if await store.tools.get(n) is None]
        known = {*self.tools, *(i.name for i in await store.tools.list())} if missing else set()
        serves = "check the name; this worker serves " + ", ".join(sorted(self.tools))
        for name in missing:
            log.warning(
                "agent %r lists tool %r, which no worker has registered: its turns wait "
                "until one serves it (%s)",
                tool.name,
                name,
                did_you_mean(name, known) or serves,
            )

    async def _announcing(self, store: Store) -> None:
        """The worker's liveness (and that of every step it holds), until it has left:
        through a stop's grace too. At once when its connection is back (see `Succession`)."""
        while True:
            try:
                await self._announce(store)
            except Exception as exc:  # NATS away: the next beat tries again
                log.debug("no worker beat: %s", exc)
            raise_if_cancelled()
            await sleep_unless_reconnected(store.nc, self.liveness.beat_every)

    async def _report(self, consumers: dict[str, tuple[Consumer, Consumer]]) -> None:
        """With metrics on, each tool's queue and unacknowledged steps."""
        while self.metrics is not None and not self._stopping.is_set():
            try:
                for tool, (shared, own) in consumers.items():
                    (queued, pending), (routed, held) = await shared.backlog(), await own.backlog()
                    self.metrics.consumer_state(tool, queued + routed, pending + held)
            except Exception as exc:  # NATS away: the next round tries again
                log.debug("no consumer report: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), REPORT_EVERY)

    async def _look(self, runner: StepRunner) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.liveness.look_every)
            try:
                await runner.stop_ended()
            except Exception as exc:  # NATS away: the next round tries again
                log.debug("no look at running tasks: %s", exc)

    async def _announce(self, store: Store) -> None:
        beat = self._beat()
        if self._rollout is not None:
            self._rollout.fleet.know(worker_key(self.worker_id), beat)
        await store.workers.announce(beat)
        self._beat_stored = time.monotonic()

    def _beat(self) -> WorkerBeat:
        return WorkerBeat(
            worker_id=self.worker_id,
            tools=sorted(self.tools),
            concurrency=self.concurrency,
            in_flight=len(self._in_flight),
            started_at=self._started_at,
            time=utcnow(),
            build=self.build,
            draining=self._draining.is_set(),
            answers=True,
        )

    def _spawn(self, runner: StepRunner, slots: Slots, delivery: Delivery) -> None:
        ahead = [self._fetching.ahead]  # given back once: when the tool runs, or it settles

        def started() -> None:
            if ahead:
                ahead.pop().give()

        task = asyncio.create_task(self._run_step(runner, delivery, started))
        self._in_flight.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._in_flight.discard(finished)
            started()
            slots.give()

        task.add_done_callback(done)

    @staticmethod
    async def _run_step(
        runner: StepRunner, delivery: Delivery, started: Callable[[], None]
    ) -> None:
        try:
            await runner.handle(delivery, started)
        except asyncio.CancelledError:
            # Shutting down mid-step: release the message so another worker takes it now.
            with contextlib.suppress(Exception):
                await delivery.retry()
            raise

    async def stop(self) -> None:
        """Stop fetching. A drain lets the running steps, and as its build's last worker
        the steps routed to its build, finish within `drain`; without one (or once
        hurried) running steps get `shutdown_grace`. What still runs then goes back to
        its queue at once (a held step is published again)."""
        grace = self.shutdown_grace.total_seconds()
        drain = None if self.drain is None or self._hurried else self.drain.total_seconds()
        clock = self._stop_clock = StopClock(grace if drain is None else drain, grace)
        say_stopping(self.worker_id, len(self._in_flight), drain, grace)
        self._draining.set()
        if drain is not None and self._store is not None:  # (not started: nothing to drain)
            with contextlib.suppress(Exception):  # draining, said at once
                await self._announce(self._store)
            await self._drain.run(clock, lambda: bool(self._in_flight), lambda: self.is_lost)
        self._stopping.set()
        self._loops += self._build_loops
        if self._loops:
            # A loop ends after its current fetch (at most FETCH_TIMEOUT); one still
            # waiting for a free slot (every slot busy with a long step) is cancelled, or
            # the grace below would not bound the stop.
            _, waiting = await asyncio.wait(self._loops, timeout=2 * FETCH_TIMEOUT)
            for loop in waiting:
                loop.cancel()
            await asyncio.gather(*self._loops, return_exceptions=True)
            self._loops.clear()
        pending = await clock.wait(set(self._in_flight))
        if pending:
            if drain is not None and not self._hurried:
                say_ran_out(self.worker_id, drain, len(pending))
            for task in pending:
                task.cancel()
            _, stuck = await asyncio.wait(pending, timeout=CANCEL_GRACE)
            if stuck:  # their messages are redelivered after ack_wait
                log.warning("%d steps did not stop when cancelled; leaving them", len(stuck))
        await self._leave()
        if self._rollout is not None:
            await self._rollout.stop()
        await self._close_tools()
        if self._nc is not None:
            await close(self._nc)
            self._nc = None

    def hurry(self) -> None:
        """A second Ctrl-C or SIGTERM: end a drain; running steps get the grace."""
        self._hurried = True
        if self._stop_clock is not None:
            log.info(
                "stopping worker %s now: steps still running get %.1f s",
                self.worker_id,
                self.shutdown_grace.total_seconds(),
            )
            self._stop_clock.hurry()

    async def _close_tools(self) -> None:
        for tool in self.tools.values():
            if tool.close is not None:
                try:
                    await tool.close()
                except Exception as exc:  # a model client that will not close: noted
                    log.warning("could not close what tool %s holds: %s", tool.name, exc)

    async def _leave(self) -> None:
        """After the steps: the delayed retries this worker kept go out now, and it stops
        being listed. If a held step did not stop, the worker stays listed, silent, so
        that a survivor hands that step on."""
        if self._succession is not None:
            await self._succession.stop()
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
        if self._store is not None:  # the acks still waiting (lost: no-op redeliveries)
            with contextlib.suppress(Exception):
                await self._store.finish_writes()
        with contextlib.suppress(Exception):
            if self._custody is not None:
                await self._custody.close()
            if self._store is not None and not (self._custody and self._custody.holding):
                await self._store.workers.forget(self.worker_id)
