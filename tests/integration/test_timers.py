"""Timers that need no worker: an input wait that expires, and a task deadline that fails
a waiting or sleeping task, fired by message schedules and handled by the dispatcher."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from tests.apps.tools import app
from tests.conftest import MakeWorker, Raw
from tether import Client, TaskFailedError
from tether.nats.store import Store
from tether.schemas import Failed, TaskStatus
from tether.testing import eventually


async def test_an_unanswered_input_wait_expires(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "asks_briefly", "input": {"timeout": 1}}, "fast"])
    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=10)
    assert waiting.input_request is not None and waiting.input_request.expires_at is not None
    started = time.monotonic()

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=15)

    assert time.monotonic() - started >= 0.5  # not before the expiry (whole seconds, rounded up)
    assert failure.value.error is not None and failure.value.error.type == "InputExpired"
    record = await handle.get()
    assert (record.failed_step, record.input_request) == (0, None)
    events = [e async for e in handle.events(timeout=5)]
    assert isinstance(events[-1], Failed) and events[-1].step == 0


async def test_an_answer_in_time_wins_and_the_late_timer_does_nothing(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "asks_briefly", "input": {"timeout": 1}}, "fast"])
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=10)
    await handle.send_input({"approved": True})
    assert (await handle.wait(timeout=10))["payload"] == {"approved": True}

    await eventually(lambda: _timers_fired(raw, store), timeout=10)  # it fired, and then
    assert (await handle.get()).status is TaskStatus.COMPLETED


@pytest.mark.parametrize(
    "first", [{"tool": "asks", "input": {}}, {"tool": "naps", "input": {"seconds": 3600}}]
)
async def test_a_deadline_fails_a_task_that_nothing_is_running(
    first: dict[str, object], client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([first, "fast"], deadline=timedelta(seconds=2))
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING or r.wake_at is not None, 10)

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=15)

    assert failure.value.error is not None and failure.value.error.type == "DeadlineExceeded"
    expected_step = 1 if first["tool"] == "naps" else 0  # asleep before step 1, or waiting at 0
    assert (await handle.get()).failed_step == expected_step


async def _timers_fired(raw: Raw, store: Store) -> None:
    names = store.names
    info = await raw.js.stream_info(names.timers_stream, subjects_filter=names.timer_subjects)
    assert not info.state.subjects, info.state.subjects
