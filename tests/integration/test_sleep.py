"""Durable sleep: a tool returns Sleep(duration); the task parks in JetStream, holding no
worker slot, and the next step starts on time."""

from __future__ import annotations

from pathlib import Path

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker, Raw
from tether import Client
from tether.nats.store import Store
from tether.schemas import StepCompleted, TaskStatus
from tether.testing import eventually


async def test_the_next_step_starts_after_the_sleep_and_no_slot_is_held(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app, concurrency=1)  # one slot: a sleeper must not hold it
    sleeper = await client.submit([{"tool": "naps", "input": {"seconds": 2}}, "clock"])
    await eventually(lambda: _sleeping(client, sleeper.task_id), timeout=10)

    # With the only slot free, another task runs to the end while the first one sleeps.
    other = await client.submit([{"tool": "fast", "input": 1}])
    assert (await other.wait(timeout=5))["payload"] == 1
    assert (await sleeper.get()).status is TaskStatus.RUNNING

    result = await sleeper.wait(timeout=15)

    assert result["given"]["napped"] == 2
    assert result["at"] - result["given"]["at"] >= 2.0  # never early
    assert result["at"] - result["given"]["at"] < 6.0  # and on time
    counts = read_executions(executions)
    assert [counts[(sleeper.task_id, 0)], counts[(sleeper.task_id, 1)]] == [1, 1]
    events = [e async for e in sleeper.events(timeout=5)]
    naps = next(e for e in events if isinstance(e, StepCompleted) and e.step == 0)
    assert naps.wake_at is not None
    record = await sleeper.get()
    assert record.wake_at is None  # cleared once the next step completed


async def test_a_sleep_on_the_last_step_completes_the_task(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app, concurrency=1)  # one slot: a sleeper must not hold it
    handle = await client.submit([{"tool": "naps", "input": {"seconds": 3600}}])
    result = await handle.wait(timeout=10)
    assert result["napped"] == 3600


async def test_a_cancelled_sleeper_does_not_wake(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(app, concurrency=1)  # one slot: a sleeper must not hold it
    handle = await client.submit([{"tool": "naps", "input": {"seconds": 1}}, "clock"])
    await eventually(lambda: _sleeping(client, handle.task_id), timeout=10)
    await handle.cancel()

    # The schedule still fires; the worker drops the stale step. Wait until it did.
    names = store.names
    await eventually(lambda: _fired(raw, names.timers_stream, names.timer_subjects), timeout=10)
    await eventually(lambda: _work_drained(raw, names.work_stream), timeout=10)
    assert read_executions(executions)[(handle.task_id, 1)] == 0
    assert (await handle.get()).status is TaskStatus.CANCELLED


async def _sleeping(client: Client, task_id: str) -> None:
    record = await client.get(task_id)
    assert record.wake_at is not None and record.current_step == 1, record


async def _fired(raw: Raw, stream: str, timers: str) -> None:
    info = await raw.js.stream_info(stream, subjects_filter=timers)
    assert not info.state.subjects, info.state.subjects


async def _work_drained(raw: Raw, stream: str) -> None:
    info = await raw.js.stream_info(stream)
    assert info.state.messages == 0, info.state
