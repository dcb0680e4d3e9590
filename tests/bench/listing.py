"""W9 of `just bench`: the first page of a filtered list with many tasks in the store,
from the status index, against reading every record (how listing worked before)."""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec

from tether import Client, NatsConfig, TaskStatus
from tether.clock import utcnow
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.tasks.rules import new_record

WAITING = 10
PAGE = 50


async def fill(client: Client, tasks: int) -> None:
    """`tasks` records written as the dispatcher writes them; `WAITING` of them waiting."""
    run = uuid.uuid4().hex[:6]
    steps = [StepSpec(tool="first")]

    async def create(n: int) -> None:
        record = new_record(TaskSubmit(task_id=f"w9-{run}-{n}", steps=steps), utcnow())
        if n % (tasks // WAITING) == 0:
            record = msgspec.structs.replace(record, status=TaskStatus.WAITING)
        await client._store.records.create(record)

    for start in range(0, tasks, 500):
        await asyncio.gather(*(create(n) for n in range(start, min(start + 500, tasks))))
    await client._store.nc.flush()


async def measure(url: str, tasks: int) -> dict[str, float]:
    async with Client(NatsConfig(url=url)) as client:
        started = time.perf_counter()
        await fill(client, tasks)
        filled = time.perf_counter() - started
        figures = {"tasks": float(tasks), "fill_s": filled}
        for status, name in ((TaskStatus.PENDING, "pending"), (TaskStatus.WAITING, "waiting")):
            started = time.perf_counter()
            page, _ = await client.list_page(status, limit=PAGE, newest_first=True)
            figures[f"first_page_{name}_ms"] = (time.perf_counter() - started) * 1000
            assert len(page) == min(PAGE, WAITING if status is TaskStatus.WAITING else PAGE)
        started = time.perf_counter()
        everything = await client.list(TaskStatus.WAITING)
        figures["read_every_record_ms"] = (time.perf_counter() - started) * 1000
        assert len(everything) == WAITING
    return figures
