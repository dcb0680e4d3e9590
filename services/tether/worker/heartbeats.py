"""The heartbeat of a step: keep the message, show liveness, notice cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from types import TracebackType

from tether.nats.cancellation import raise_if_cancelled
from tether.nats.delivery import Delivery
from tether.nats.store import Store
from tether.worker.context import StepContext

log = logging.getLogger("tether.worker")


class StepHeartbeat:
    """From receipt to settlement, every `interval`: `extend()` the delivery so
    JetStream does not redeliver it. Once a tool runs (`attach`), also a put to the
    heartbeat bucket and a look at the task record: when the task has ended
    (cancelled), the tool's task is cancelled and `ended` is set.
    """

    def __init__(self, delivery: Delivery, store: Store, interval: timedelta) -> None:
        self._delivery = delivery
        self._store = store
        self._interval = interval.total_seconds()
        self._ctx: StepContext | None = None
        self._tool: asyncio.Future[object] | None = None
        self._loop: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.ended = False

    def attach(self, ctx: StepContext, tool: asyncio.Future[object]) -> None:
        self._ctx, self._tool = ctx, tool
        if self.ended:
            tool.cancel()

    def end(self) -> None:
        """The task ended elsewhere (cancelled): stop the tool if it runs, or when it starts."""
        self.ended = True
        if self._tool is not None:
            self._tool.cancel()

    def detach(self) -> None:
        self._ctx = self._tool = None

    async def __aenter__(self) -> StepHeartbeat:
        # A timer, not a task: most steps end before their first beat.
        self._timer = asyncio.get_running_loop().call_later(self._interval, self._fire)
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
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away for a moment: keep beating
                log.warning("heartbeat of %s failed: %s", self._delivery.subject, exc)
            raise_if_cancelled()  # or a loop whose cancel a NATS call ate beats on forever
            await asyncio.sleep(self._interval)

    async def _beat(self) -> None:
        await self._delivery.extend()
        ctx, tool = self._ctx, self._tool
        if ctx is None or tool is None:
            return
        await self._store.beat(ctx.heartbeat())
        found = await self._store.get_record(ctx.task_id)
        if found is None or found.record.status.is_terminal:
            self.end()
