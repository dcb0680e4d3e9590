"""`TaskHandle`: one task, followed by id, from any process at any time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from nats.js.api import DeliverPolicy

from schemas.codec import event_decoder, record_decoder
from schemas.events import TERMINAL_EVENTS, AnyStatusEvent
from schemas.tasks import TaskRecord, TaskStatus
from services.engine import lifecycle
from services.errors import TaskCancelledError, TaskFailedError, TaskTimeoutError
from services.nats.store import Store


class TaskHandle:
    def __init__(self, store: Store, task_id: str) -> None:
        self._store = store
        self.task_id = task_id

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r})"

    async def get(self) -> TaskRecord:
        return (await self._store.require_record(self.task_id)).record

    async def wait(self, timeout: float | timedelta | None = None) -> Any:
        """The task's result once it completes.

        Raises TaskFailedError or TaskCancelledError when it ends otherwise, and
        TaskTimeoutError when `timeout` passes first (the task keeps running).
        """
        record = await self.wait_until_done(timeout)
        if record.status is TaskStatus.COMPLETED:
            return record.result
        if record.status is TaskStatus.CANCELLED:
            raise TaskCancelledError(self.task_id)
        raise TaskFailedError(self.task_id, record.error)

    async def wait_until_done(self, timeout: float | timedelta | None = None) -> TaskRecord:
        """The record once the task has ended, whatever the outcome."""
        return await self.wait_for(lambda r: r.status.is_terminal, timeout)

    async def wait_for(self, condition: Any, timeout: float | timedelta | None = None) -> TaskRecord:
        """The first version of the record for which `condition(record)` is true."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        deadline = None if seconds is None else time.monotonic() + seconds
        watcher = await self._store.watch_record(self.task_id)
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TaskTimeoutError(
                        self.task_id, f"task {self.task_id!r} did not finish within {seconds}s; it keeps running"
                    )
                try:
                    entry = await watcher.updates(timeout=remaining if remaining is not None else 3600)
                except (TimeoutError, asyncio.TimeoutError):
                    continue
                if entry is None or not entry.value:
                    continue
                record = record_decoder.decode(entry.value)
                if condition(record):
                    return record
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()

    async def events(self, timeout: float | None = None) -> AsyncIterator[AnyStatusEvent]:
        """Every status event of the task: history first, then live, without a gap.

        Ends after the task's terminal event; `timeout` bounds the wait for each event.
        """
        js = self._store.js
        subject = self._store.names.status_subject(self.task_id)
        sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        try:
            while True:
                msg = await sub.next_msg(timeout=timeout if timeout is not None else 3600)
                event = event_decoder.decode(msg.data)
                yield event
                if isinstance(event, TERMINAL_EVENTS):
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def cancel(self) -> TaskRecord:
        return await lifecycle.cancel_task(self._store, self.task_id)

    async def send_input(self, data: Any) -> None:
        await lifecycle.send_input(self._store, self.task_id, data)
