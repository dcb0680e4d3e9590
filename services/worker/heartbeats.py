"""The heartbeat of a running step: keep the message, show liveness, notice cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from types import TracebackType

from nats.aio.msg import Msg

from services.nats.store import Store
from services.worker.context import StepContext

log = logging.getLogger("tether.worker")


class StepHeartbeat:
    """While active: every `interval`, `in_progress()` on the message (so JetStream does
    not redeliver it), a put to the heartbeat bucket, and a look at the task record.
    When the task has ended (cancelled), `task` is cancelled and `ended` is set.
    """

    def __init__(
        self, msg: Msg, store: Store, ctx: StepContext, interval: timedelta, task: asyncio.Task[object]
    ) -> None:
        self._msg = msg
        self._store = store
        self._ctx = ctx
        self._interval = interval.total_seconds()
        self._task = task
        self._loop: asyncio.Task[None] | None = None
        self.ended = False

    async def __aenter__(self) -> StepHeartbeat:
        self._loop = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away for a moment: keep beating
                log.warning("heartbeat of %s failed: %s", self._ctx.idempotency_key, exc)
            if self.ended:
                return

    async def _beat(self) -> None:
        await self._msg.in_progress()
        await self._store.beat(self._ctx.heartbeat())
        found = await self._store.get_record(self._ctx.task_id)
        if found is None or found.record.status.is_terminal:
            self.ended = True
            self._task.cancel()
