"""The heartbeat of a step: keep the message, show liveness, notice cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import TracebackType

from tether.cancellation import raise_if_cancelled
from tether.errors import NatsUnavailableError
from tether.nats.delivery import Delivery
from tether.nats.store import Store
from tether.tools.context import StepContext
from tether.worker.custody import Custody

log = logging.getLogger("tether.worker")


class StepHeartbeat:
    """From receipt to settlement, keep the message without costing a message a second.

    Half an `interval` in, a step that is still running goes into its worker's custody
    (`custody`, see `tether.worker.custody`): its message is acknowledged and the worker's
    own beat keeps it from then on. A tool with a global concurrency limit keeps its
    message instead (an acknowledged step would not count against the limit), and so does
    any step while custody fails: those `extend()` every half `interval`. The step's
    heartbeat key (worker, progress) is written once the tool runs, and again when it
    reports progress. Cancellation comes as a notice (`end`), or from the worker's rare
    look at the records of what it runs.
    """

    def __init__(
        self,
        delivery: Delivery,
        store: Store,
        interval: timedelta,
        custody: Custody | None = None,
        started: Callable[[], None] | None = None,
        at_once: bool = False,
    ) -> None:
        self._delivery = delivery
        self._at_once = at_once
        """Hold the step as soon as it starts: an LLM call is slow and costly, and its
        step must not come back to another worker while a busy process is late with
        its first beat (one KV write is nothing beside the call)."""
        self._started = started
        self._store = store
        self._every = interval.total_seconds() / 2
        """A beat every half heartbeat: the message's ack wait (`Liveness.ack_wait`) is
        half a heartbeat and the step's slack."""
        self._custody = custody
        self._ctx: StepContext | None = None
        self._tool: asyncio.Future[object] | None = None
        self._loop: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._shown = False
        self.mark: Callable[[], Awaitable[object]] | None = None
        """Written with the step's first beat: that its attempt started (`runs`)."""
        self.ended = False
        self.handed_over = False
        self.superseded = False

    def attach(self, ctx: StepContext, tool: asyncio.Future[object]) -> None:
        self._ctx, self._tool = ctx, tool
        if self._started is not None:
            self._started()
        if self.ended:
            tool.cancel()

    def end(self) -> None:
        """The task ended elsewhere (cancelled): stop the tool if it runs, or when it starts."""
        self.ended = True
        if self._tool is not None:
            self._tool.cancel()

    def hand_over(self) -> None:
        """A survivor took the held step over: stop it here and leave it to them."""
        self.handed_over = True
        self.end()

    def supersede(self) -> None:
        """Another attempt of this step, in this process, has its result: stop this one
        (its message comes back later and finds the step done)."""
        self.superseded = True
        self.end()

    def runs(self, step: int, branch: int | None) -> bool:
        """Whether this attempt's tool runs `step` (`branch`) now."""
        ctx = self._ctx
        return ctx is not None and (ctx.step, ctx.branch) == (step, branch)

    @property
    def held(self) -> bool:
        """Whether the step is in its worker's custody (see `tether.worker.custody`)."""
        return self._delivery.held

    @property
    def held_key(self) -> str:
        """The key of the step's copy in custody ("" when not held)."""
        return self._delivery.held_key

    def detach(self) -> None:
        self._ctx = self._tool = None

    async def __aenter__(self) -> StepHeartbeat:
        # A timer, not a task: most steps end before their first beat.
        first = 0.0 if self._at_once else self._every
        self._timer = asyncio.get_running_loop().call_later(first, self._fire)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    def _fire(self) -> None:
        self._timer = None
        self._loop = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self.ended:
            try:
                if await self._keep():
                    return  # held: nothing more to do until it settles
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away for a moment: keep beating
                log.log(level(exc), "heartbeat of %s failed: %s", self._delivery.subject, exc)
            raise_if_cancelled()  # or a loop whose cancel a NATS call ate beats on forever
            await asyncio.sleep(self._every)

    async def _keep(self) -> bool:
        """One beat; True once the step is held and shown."""
        delivery = self._delivery
        if not delivery.held:
            await delivery.extend()  # until held (a burst of holds may take a while)
            if self._custody is not None:
                try:
                    await delivery.hold(self._custody)
                except Exception as exc:  # NATS away: the next beat extends and tries again
                    log.log(level(exc), "could not hold %s: %s", delivery.subject, exc)
        ctx = self._ctx
        if ctx is not None and not self._shown:
            shown = self._store.heartbeats.put(ctx.heartbeat())
            if self.mark is None:
                await shown
            else:
                await asyncio.gather(shown, self.mark())
                self.mark = None
            self._shown = True
        return delivery.held and self._shown


def level(exc: BaseException) -> int:
    """How loud a beat's failure is: a NATS call that timed out (a loaded server; the
    next beat tries again) is a DEBUG line, anything else (NATS gone) a WARNING."""
    cause = exc.__cause__ if isinstance(exc, NatsUnavailableError) else exc
    return logging.DEBUG if isinstance(cause, TimeoutError) else logging.WARNING
