"""pending → running for a task's first step, written only if the step takes a while."""

from __future__ import annotations

import asyncio

from tether.clock import utcnow
from tether.nats.recent import Versioned
from tether.nats.store import Store
from tether.schemas.work import WorkMessage
from tether.tasks import rules

START_DELAY = 0.1


class RecordStart:
    """pending → running, written once the first step has run for `START_DELAY`.

    A first step that ends sooner goes straight from pending to its completion write,
    which saves one JetStream write per task; a longer one shows `running` within
    `START_DELAY` of starting (its `step_started` event goes out at once either way).
    """

    def __init__(
        self, store: Store, found: Versioned, work: WorkMessage, build: str | None = None
    ) -> None:
        self._store = store
        self._found = found
        self._work = work
        self._build = build
        self._write: asyncio.Task[Versioned] | None = None
        self._timer = asyncio.get_running_loop().call_later(START_DELAY, self._fire)

    def _fire(self) -> None:
        self._write = asyncio.create_task(self._record())

    async def _record(self) -> Versioned:
        step = self._work.step
        stored, _ = await self._store.records.update(
            self._work.task_id,
            lambda r: rules.start_step(r, step, utcnow(), self._build),
            self._found,
        )
        return stored

    async def settle(self) -> Versioned:
        """The record to finish the step from: as read, or as the start write left it."""
        self._timer.cancel()
        return self._found if self._write is None else await self._write
