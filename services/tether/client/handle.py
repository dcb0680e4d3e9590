"""`TaskHandle`: one task, followed by id, from any process at any time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import msgspec

from tether.cancellation import raise_if_cancelled
from tether.durations import as_seconds
from tether.errors import (
    NatsUnavailableError,
    TaskCancelledError,
    TaskConflictError,
    TaskFailedError,
    TaskTimeoutError,
)
from tether.nats.feeds import record_end, record_update, task_events
from tether.nats.replay import GIVE_UP_AFTER
from tether.nats.store import Store
from tether.nats.tokens import token_chunks
from tether.schemas import types
from tether.schemas.events import AnyStatusEvent, ends_feed
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.work import TokenChunk
from tether.tasks.forks import full_plan
from tether.tasks.service import TaskService

RECHECK_INTERVAL = 5.0


class TaskHandle:
    def __init__(self, store: Store, task_id: str, result_type: Any = None) -> None:
        self._store = store
        self.task_id = task_id
        self.result_type = result_type
        """What `wait()` decodes the result into (an agent's `output_type`); None: as is."""

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r})"

    async def get(self) -> TaskRecord:
        return (await self._store.records.require(self.task_id)).record

    async def output(self, step: int) -> Any:
        """The output of one completed step (from its checkpoint; a blob resolved)."""
        found = await self._store.checkpoints.get(self.task_id, step)
        if found is None:
            record = await self.get()
            if record.status is TaskStatus.COMPLETED and step == record.plan_length - 1:
                return await self._store.blobs.resolve(record.result)
            raise TaskConflictError(self.task_id, f"step {step} of {self.task_id!r} has no output")
        return await self._store.blobs.resolve(found.output)

    async def plan(self) -> list[StepSpec]:
        """Every step of the task, finished ones too (the record keeps only the rest)."""
        return await full_plan(self._store, await self.get())

    async def wait(self, timeout: float | timedelta | None = None) -> Any:
        """The task's result once it completes.

        Raises TaskFailedError or TaskCancelledError when it ends otherwise, and
        TaskTimeoutError when `timeout` passes first (the task keeps running).
        """
        record = await self.wait_until_done(timeout)
        if record.status is TaskStatus.COMPLETED:
            result = await self._store.blobs.resolve(record.result)  # large: by reference
            if self.result_type is None:
                return result
            return types.convert(result, self.result_type)  # a Struct or a Pydantic model
        if record.status is TaskStatus.CANCELLED:
            raise TaskCancelledError(self.task_id)
        raise TaskFailedError(self.task_id, record.error)

    async def wait_until_done(self, timeout: float | timedelta | None = None) -> TaskRecord:
        """The record once the task has ended, whatever the outcome: woken by the task's
        end notice, so a thousand waits cost a thousand core subscriptions, no consumer."""
        return await self._follow(timeout, record_end)

    async def wait_for(
        self, condition: Callable[[TaskRecord], bool], timeout: float | timedelta | None = None
    ) -> TaskRecord:
        """The first version of the record for which `condition(record)` is true.

        Follows the record with a KV watch, re-reading it every few seconds and
        re-watching after errors, so a NATS restart or reconnect cannot stall it; NATS
        away for `GIVE_UP_AFTER` seconds raises NatsUnavailableError (the task goes on).
        """

        async def update(store: Store, task_id: str, window: float) -> TaskRecord | None:
            found = await store.records.get(task_id)
            if found is not None and condition(found.record):
                return found.record
            return await record_update(store, task_id, condition, window)

        return await self._follow(timeout, update)

    async def _follow(
        self,
        timeout: float | timedelta | None,
        follow: Callable[[Store, str, float], Awaitable[TaskRecord | None]],
    ) -> TaskRecord:
        """`follow` the record (it reads it first) a few seconds at a time until it
        returns the version waited for."""
        seconds = None if timeout is None else as_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        away_since: float | None = None
        while True:
            raise_if_cancelled()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TaskTimeoutError(
                    self.task_id,
                    f"task {self.task_id!r} did not finish within {seconds}s; it keeps running",
                )
            window = RECHECK_INTERVAL if remaining is None else min(remaining, RECHECK_INTERVAL)
            try:
                record = await follow(self._store, self.task_id, window)
            except NatsUnavailableError:
                away_since = away_since or time.monotonic()
                if time.monotonic() - away_since > GIVE_UP_AFTER:
                    raise
                record = None  # reconnecting: try again until the deadline
                await asyncio.sleep(min(window, 0.25))
            else:
                away_since = None
            if record is not None:
                return record

    async def events(self, timeout: float | None = None) -> AsyncIterator[AnyStatusEvent]:
        """Every status event of the task: history first, then live, without a gap.

        Ends after the terminal event of the task's current run (a retried task's
        earlier `failed` is not its end); `timeout` bounds the wait for each event.
        """
        found = await self._store.records.get(self.task_id)
        generation = found.record.generation if found is not None else 1
        async for event, _ in task_events(self._store, self.task_id, timeout):
            yield event
            if ends_feed(event, generation):
                return

    async def stream(self, after: int = 0) -> AsyncIterator[TokenChunk]:
        """The text the task's steps stream (an agent's tokens), as it is written, until
        the task ends: from the start, or after stream sequence `after` (a chunk's
        `stream_seq` from an earlier call) to resume without repeats or gaps.

        A chunk whose `attempt` is higher than the last one seen for its step starts
        that step's text over: the earlier attempt was cut off by a crash or an error.
        """
        async for chunk, sequence in token_chunks(self._store, self.task_id, after):
            yield msgspec.structs.replace(chunk, stream_seq=sequence)

    async def cancel(self) -> TaskRecord:
        return await TaskService(self._store).endings.cancel(self.task_id)

    async def send_input(self, data: Any) -> None:
        await TaskService(self._store).answers.send_input(self.task_id, data)
