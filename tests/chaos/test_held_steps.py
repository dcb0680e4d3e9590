"""Held steps: a long step leaves JetStream's books once its worker holds it, and runs
again elsewhere when that worker is SIGKILLed (its original message is acknowledged, so
only a survivor can bring it back)."""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.apps.tools import read_executions
from tests.conftest import APP, start_worker, stop_worker
from tether import App, Client, NatsConfig, RetryPolicy, StepContext, Worker
from tether.errors import NatsUnavailableError
from tether.nats.checkpoints import Checkpoints
from tether.nats.store import Store
from tether.schemas import StepStarted, TaskStatus
from tether.testing import eventually
from tether.worker import step

held = App("held")
gate = asyncio.Event()


@held.tool()
async def waits(ctx: StepContext) -> int:
    await gate.wait()
    return ctx.attempt


@held.tool(retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0))
async def fails_late(ctx: StepContext) -> int:
    await asyncio.sleep(0.8)  # held by then (half the default 1 s heartbeat)
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails after it was held")
    return ctx.attempt


@held.tool()
async def naps(ctx: StepContext) -> int:
    await asyncio.sleep(0.8)  # held by then
    return ctx.attempt


async def held_entries(store: Store) -> list[str]:
    """The held steps' keys (a removed one's marker stays a little while: skipped)."""
    keys = await store.keys(store.names.workers_bucket, "*.>")
    return [key for key in keys if await store.workers.entry(key) is not None]


async def test_a_held_step_is_off_the_consumers_books_and_its_entry_goes_with_it(
    config: NatsConfig, client: Client, store: Store, dispatcher: object
) -> None:
    gate.clear()
    async with Worker(held, config, worker_id="holder"):
        handle = await client.submit([{"tool": "waits"}])

        async def is_held() -> None:
            assert await held_entries(store) == [f"holder.{handle.task_id}.0"]
            backlog = await store.tools.backlog("waits")
            assert backlog is not None and backlog[:2] == (0, 0), backlog  # acked

        await eventually(is_held, timeout=10)
        gate.set()
        assert (await handle.wait(timeout=10)) == 1

        async def released() -> None:
            assert await held_entries(store) == []

        await eventually(released, timeout=10)


async def test_a_held_step_that_fails_is_retried_with_its_attempts_counted(
    config: NatsConfig, client: Client, store: Store, dispatcher: object
) -> None:
    async with Worker(held, config):
        handle = await client.submit([{"tool": "fails_late"}])
        assert (await handle.wait(timeout=20)) == 2
    starts = [e.attempt async for e in handle.events(timeout=5) if isinstance(e, StepStarted)]
    assert starts == [1, 2]
    assert await held_entries(store) == []


async def test_a_held_step_whose_handling_fails_runs_again_rather_than_waiting_for_ever(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A held step's message is acknowledged, so nothing would redeliver it when its
    handling fails for good (NATS away for longer than the worker tries in place): the
    worker publishes it again."""
    original = Checkpoints.create
    failures = [NatsUnavailableError("NATS did not answer (a test's outage)")]

    async def fails_once(self: Checkpoints, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Checkpoints, "create", fails_once)
    monkeypatch.setattr(step, "TRY_IN_PLACE_FOR", timedelta(0))  # no second try in place
    gate.set()
    async with Worker(held, config):
        handle = await client.submit([{"tool": "naps"}, {"tool": "waits"}])
        assert (await handle.wait(timeout=30)) == 1
    starts = [
        e.attempt
        async for e in handle.events(timeout=5)
        if isinstance(e, StepStarted) and e.step == 0
    ]
    assert starts == [1, 2] and not failures  # step 0 ran again after the failure
    assert await handle.output(0) == 2
    assert await held_entries(store) == []


@pytest.mark.slow
async def test_a_sigkilled_workers_held_steps_run_again_on_a_survivor(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    first = start_worker(config, APP, log=tmp_path / "first.log")
    plans = [[{"tool": "slow", "input": {"sleep": 4}}, {"tool": "fast"}] for _ in range(5)]
    handles = [await client.submit(plan) for plan in plans]

    async def all_held() -> None:
        assert len(await held_entries(store)) == len(handles)
        backlog = await store.tools.backlog("slow")
        assert backlog is not None and backlog[1] == 0, backlog  # nothing left to redeliver

    await eventually(all_held, timeout=20)
    survivor = start_worker(config, APP, log=tmp_path / "survivor.log")
    try:
        await eventually(lambda: _workers(store, 2), timeout=20)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        results = [await h.wait(timeout=30) for h in handles]
    finally:
        stop_worker(survivor)
    assert [r["step"] for r in results] == [1] * len(handles)
    counts = read_executions(executions)
    assert {counts[(h.task_id, 0)] for h in handles} == {2}  # once on each worker
    assert {counts[(h.task_id, 1)] for h in handles} == {1}
    for handle in handles:
        starts = [
            e.attempt
            async for e in handle.events(timeout=5)
            if isinstance(e, StepStarted) and e.step == 0
        ]
        assert starts == [1, 2]
        assert (await handle.get()).status is TaskStatus.COMPLETED
    assert await held_entries(store) == []
    assert [w.worker_id for w in await store.workers.list()] == []


async def _workers(store: Store, n: int) -> Any:
    workers = await store.workers.list()
    assert len(workers) == n, workers


@pytest.mark.slow
async def test_a_step_that_kills_every_worker_that_holds_it_is_given_up_as_a_poison(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    """Its deaths travel with a step published again, so an OOM loop ends: two deaths make
    it a suspect that runs alone (no attempt charged: others may have run beside it), two
    deaths alone condemn it."""
    workers = [start_worker(config, APP, log=tmp_path / f"w{i}.log") for i in range(5)]
    try:
        await eventually(lambda: _workers(store, 5), timeout=20)
        handle = await client.submit([{"tool": "dies_held"}])
        record = await handle.wait_until_done(timeout=60)
    finally:
        for worker in workers:
            if worker.poll() is None:
                stop_worker(worker)
    assert record.status is TaskStatus.FAILED
    assert record.error is not None and record.error.type == "SuspectedPoison", record.error
    assert read_executions(executions)[(handle.task_id, 0)] == 4
    assert sum(worker.returncode == -signal.SIGKILL for worker in workers) == 4
