"""Retries, dead letters, timeouts and deadlines on a real nats-server."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker, Raw
from tether import Client, NatsConfig, TaskFailedError, Worker
from tether.clock import utcnow
from tether.nats.store import Store
from tether.schemas import DeadLetter, Failed, StepRetrying, TaskStatus
from tether.schemas.names import Names
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord
from tether.schemas.work import WorkMessage
from tether.testing import eventually


async def dead_letters(raw: Raw, names: Names, tool: str) -> list[DeadLetter]:
    sub = await raw.js.subscribe(names.dead_letter_subject(tool), ordered_consumer=True)
    letters = []
    try:
        while True:
            msg = await sub.next_msg(timeout=0.5)
            letters.append(msgspec.json.decode(msg.data, type=DeadLetter))
    except TimeoutError:
        return letters
    finally:
        await sub.unsubscribe()


async def test_retries_with_backoff_then_succeeds(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "flaky", "input": {"succeed_on": 3}}])

    assert await handle.wait(timeout=20) == {"attempt": 3}
    events = [e async for e in handle.events(timeout=5)]
    retries = [e for e in events if isinstance(e, StepRetrying)]
    assert [e.attempt for e in retries] == [1, 2]
    assert all(e.retry_in_ms == 50 for e in retries)
    assert read_executions(executions)[(handle.task_id, 0)] == 3


async def test_exhausted_retries_fail_the_task_and_dead_letter_the_step(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "broken", "input": {}}])

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)

    assert failure.value.error is not None
    assert failure.value.error.type == "ValueError"
    assert "gave up after 3 attempts: the service is down" in failure.value.error.message
    assert read_executions(executions)[(handle.task_id, 0)] == 3
    record = await handle.get()
    assert record.status is TaskStatus.FAILED and record.failed_step == 0
    names = store.names
    letters = await eventually(lambda: _letters_for(raw, names, "broken", handle.task_id))
    assert letters[0].step == 0 and letters[0].attempt == 3


async def _letters_for(raw: Raw, names: Names, tool: str, task_id: str) -> list[DeadLetter]:
    letters = [d for d in await dead_letters(raw, names, tool) if d.task_id == task_id]
    assert letters, f"no dead letter for {task_id}"
    return letters


async def test_terminal_error_is_not_retried(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "refuses", "input": {}}, {"tool": "fast"}])

    with pytest.raises(TaskFailedError, match="permission denied"):
        await handle.wait(timeout=20)

    counts = read_executions(executions)
    assert counts[(handle.task_id, 0)] == 1
    assert counts[(handle.task_id, 1)] == 0
    events = [e async for e in handle.events(timeout=5)]
    assert isinstance(events[-1], Failed) and events[-1].error is not None
    assert events[-1].error.type == "TerminalError"
    assert await _letters_for(raw, store.names, "refuses", handle.task_id)


async def test_step_timeout_is_retried_then_fails(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "hangs", "input": {}}])

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)

    assert failure.value.error is not None and failure.value.error.type == "StepTimeout"
    assert read_executions(executions)[(handle.task_id, 0)] == 2


async def test_per_step_timeout_overrides_the_tool(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit(
        [{"tool": "slow", "input": {"sleep": 2}, "timeout_ms": 100, "retry": {"max_attempts": 1}}]
    )

    with pytest.raises(TaskFailedError, match=r"timed out after 0\.1s"):
        await handle.wait(timeout=10)


async def test_task_deadline_fails_the_task(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit(
        [{"tool": "slow", "input": {"sleep": 5}}, {"tool": "fast"}],
        deadline=timedelta(milliseconds=500),
    )

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=10)

    assert failure.value.error is not None
    assert failure.value.error.type == "DeadlineExceeded"


async def test_retry_a_failed_task_from_its_failed_step(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_worker(app)
    gate = tmp_path / "gate"
    monkeypatch.setenv("TETHER_TEST_GATE", str(gate))
    handle = await client.submit([{"tool": "fast", "input": 1}, "gated", "fast"])
    with pytest.raises(TaskFailedError, match="the gate is closed"):
        await handle.wait(timeout=20)
    gate.touch()

    await client.retry(handle.task_id)

    result = await handle.wait(timeout=20)
    assert result["payload"] == {"passed": True, "input": {"step": 0, "payload": 1}}
    counts = read_executions(executions)
    assert counts[(handle.task_id, 0)] == 1, "the completed step must not run again"
    assert counts[(handle.task_id, 1)] == 2
    record = await handle.get()
    assert record.generation == 2 and record.error is None


async def test_a_record_ahead_of_a_lost_checkpoint_runs_the_step_again(
    config: NatsConfig, client: Client, store: Store, registered: None, executions: Path
) -> None:
    """A step's checkpoint and record writes are in flight together: if only the record
    landed (a crash in between), the step's output is gone, so the step runs again."""
    now = utcnow()
    steps = [StepSpec(tool="fast", input=1), StepSpec(tool="fast")]
    record = TaskRecord(
        task_id="ahead",
        status=TaskStatus.RUNNING,
        steps=steps,
        current_step=1,
        created_at=now,
        updated_at=now,
    )
    assert await store.records.create(record) is not None
    work = WorkMessage(task_id="ahead", step=0, tool="fast", input=1)
    await store.publish_work(work, store.names.step_msg_id("ahead", 0))

    async with Worker(app, config):
        result = await client.handle("ahead").wait(timeout=10)

    assert result == {"step": 1, "payload": {"step": 0, "payload": 1}}
    counts = read_executions(executions)
    assert (counts[("ahead", 0)], counts[("ahead", 1)]) == (1, 1)
    assert await store.checkpoints.get("ahead", 0) is not None
