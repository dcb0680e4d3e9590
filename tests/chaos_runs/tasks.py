"""Submitting and reading tasks through failovers: every call is retried until it gets
through or its deadline passes, as an operator's client would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats.errors

from tests.chaos_runs.executions import StepKey
from tests.chaos_runs.report import say
from tether import Client, TaskExistsError, TaskRecord, TaskStatus
from tether.errors import NatsUnavailableError, TaskConflictError
from tether.nats.store import Store

T = TypeVar("T")
TRANSIENT: tuple[type[BaseException], ...] = (NatsUnavailableError, nats.errors.Error, OSError)
"""What a call raises while NATS fails over (TimeoutError is an OSError)."""
READS_AT_ONCE = 50
POLL = 0.5
QUIET = 2.0
FEW = 50
"""When the index has not moved for QUIET seconds and at most FEW tasks (or 5 %) are
left, their records are read instead of waiting for index rows that may be lost."""


async def retrying(call: Callable[[], Awaitable[T]], what: str, timeout: float = 120.0) -> T:
    """`call()`, again after each transient failure, until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except TRANSIENT as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: still failing after {timeout:.0f}s ({exc!r})") from exc
        await asyncio.sleep(0.25)


async def submit(client: Client, steps: Sequence[Any], task_id: str) -> None:
    """Submit once, whatever fails over meanwhile: a retry that finds the task was
    accepted by an earlier try is done."""

    async def once() -> None:
        try:
            await client.submit(steps, task_id=task_id)
        except TaskExistsError:
            pass

    await retrying(once, f"submit {task_id}")


async def cancel(client: Client, task_id: str) -> None:
    """Cancel a running task (a retry that finds it cancelled by an earlier try is done)."""

    async def once() -> None:
        try:
            await client.cancel(task_id)
        except TaskConflictError:
            if (await client.get(task_id)).status is not TaskStatus.CANCELLED:
                raise

    await retrying(once, f"cancel {task_id}")


async def answer(client: Client, task_id: str, data: Any) -> None:
    """Answer a waiting task (sending the same answer twice is accepted as once)."""
    await retrying(lambda: client.send_input(task_id, data), f"input to {task_id}")


async def wait_status(
    client: Client, task_id: str, wanted: Callable[[TaskRecord], bool], timeout: float
) -> TaskRecord:
    """The task's record once `wanted(record)`; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await retrying(lambda: client._store.records.get(task_id), f"get {task_id}")
        if found is not None and wanted(found.record):
            return found.record
        await asyncio.sleep(0.25)
    raise TimeoutError(f"task {task_id!r} did not get there within {timeout:.0f}s")


async def finished_ids(store: Store, statuses: Sequence[TaskStatus]) -> set[str]:
    """Tasks the status index lists under one of `statuses` (a hint, one request each)."""

    async def rows() -> list[str]:
        return [row for status in statuses for row in await store.records.index_rows(status.value)]

    return {row.rsplit(".", 1)[1] for row in await retrying(rows, "read the index")}


class Stuck(Exception):
    """No task finished for a while: the run stops waiting for the rest."""


@dataclass
class Finished:
    """Which tasks have ended: the status index says it for most, in one request, and
    the records for the last few (so a lost row shows in `index_disagreements` at the
    end, not as a run that waits for ever)."""

    store: Store
    statuses: Sequence[TaskStatus]
    known: set[str] = field(default_factory=set)

    async def among(self, wanted: set[str], read_rest: bool) -> set[str]:
        self.known |= await finished_ids(self.store, self.statuses)
        if read_rest:
            rest = await read_records(self.store, wanted - self.known)
            self.known |= {t for t, r in rest.items() if r and r.status in self.statuses}
        return self.known & wanted


async def wait_finished(
    store: Store,
    task_ids: Iterable[str],
    statuses: Sequence[TaskStatus],
    share: float = 1.0,
    stuck_after: float = 120.0,
    tick: Callable[[], None] = lambda: None,
) -> int:
    """Wait until `share` of the tasks has one of `statuses`, calling `tick` on every
    poll and logging progress; raise Stuck when none finishes for `stuck_after` s."""
    wanted, finished = set(task_ids), Finished(store, statuses)
    told, last, moved = 0.0, -1, time.monotonic()
    while True:
        quiet = time.monotonic() - moved > QUIET
        few = len(wanted) - max(last, 0) <= max(FEW, len(wanted) // 20)
        count = len(await finished.among(wanted, read_rest=quiet and few))
        if count >= share * len(wanted):
            return count
        tick()
        now = time.monotonic()
        if count != last:
            last, moved = count, now
        elif now - moved > stuck_after:
            raise Stuck(f"{count}/{len(wanted)} finished, none for {stuck_after:.0f}s")
        if now - told > 5:
            say(f"{count}/{len(wanted)} finished")
            told = now
        await asyncio.sleep(POLL)


async def read_records(store: Store, task_ids: Iterable[str]) -> dict[str, TaskRecord | None]:
    """Every task's record (None: the task does not exist), read a few at a time."""

    async def one(task_id: str) -> TaskRecord | None:
        found = await retrying(lambda: store.records.get(task_id), f"get {task_id}")
        return None if found is None else found.record

    ids = list(task_ids)
    found: dict[str, TaskRecord | None] = {}
    for start in range(0, len(ids), READS_AT_ONCE):
        chunk = ids[start : start + READS_AT_ONCE]
        found.update(zip(chunk, await asyncio.gather(*(one(t) for t in chunk)), strict=True))
    return found


def index_disagreements(
    rows: Iterable[str], records: dict[str, TaskRecord | None]
) -> dict[str, str]:
    """The tasks whose index rows (`<prefix>.index.<status>.<µs>.<id>` subjects) are not
    exactly one, under their record's status, and what the index has for each."""
    found: dict[str, list[str]] = {task_id: [] for task_id in records}
    for row in rows:
        _, _, status, _, task_id = row.split(".", 4)
        if task_id in found:
            found[task_id].append(status)
    return {
        task_id: ", ".join(sorted(statuses)) or "no row"
        for task_id, statuses in found.items()
        if statuses != ([] if records[task_id] is None else [records[task_id].status.value])
    }


async def index_agrees(
    store: Store, records: dict[str, TaskRecord | None], settle: float = 10.0
) -> dict[str, str]:
    """`index_disagreements` once the index agrees with the records, or after `settle`
    seconds (a move in flight at the end may still be storing its row)."""
    deadline = time.monotonic() + settle
    while True:
        rows = await retrying(store.records.index_rows, "read the index")
        wrong = index_disagreements(rows, records)
        if not wrong or time.monotonic() > deadline:
            return wrong
        await asyncio.sleep(POLL)


def _step_key(key: str) -> StepKey | None:
    """(task, step, branch) of a checkpoint key; None for a memo (`...once.<name>`)."""
    task_id, step, *rest = key.split(".")
    if not rest:
        return (task_id, int(step), None)
    if len(rest) == 1 and rest[0].startswith("b"):
        return (task_id, int(step), int(rest[0][1:]))
    return None


async def stored_at(store: Store, records: Iterable[TaskRecord]) -> dict[StepKey, float]:
    """When each step's output was stored: its checkpoint's time, and for the last step
    of a completed task (which has no checkpoint) the time the record completed."""
    keys = [k for k in map(_step_key, await store.keys(store.names.checkpoints_bucket)) if k]

    async def one(key: StepKey) -> tuple[StepKey, float | None]:
        found = await retrying(lambda: store.checkpoints.get(*key), f"checkpoint {key}")
        return key, None if found is None else found.time.timestamp()

    times: dict[StepKey, float] = {}
    for start in range(0, len(keys), READS_AT_ONCE):
        chunk = keys[start : start + READS_AT_ONCE]
        for key, at in await asyncio.gather(*(one(k) for k in chunk)):
            if at is not None:
                times[key] = at
    for record in records:
        if record.status is TaskStatus.COMPLETED:
            times.setdefault((record.task_id, record.plan_length - 1, None), _at(record))
    return times


def _at(record: TaskRecord) -> float:
    return record.updated_at.timestamp()
