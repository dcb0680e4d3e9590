"""Following a task's events: one rule decides the end, so a retried task is followed to
its real end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.tools import app
from tests.conftest import MakeWorker
from tether import Client, Step


async def test_the_events_of_a_failed_then_retried_task_end_at_its_completion(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_worker(app)
    gate = tmp_path / "gate"
    monkeypatch.setenv("TETHER_TEST_GATE", str(gate))
    handle = await client.submit([Step(tool="gated", input={"n": 1})])
    await handle.wait_for(lambda r: r.status.value == "failed", timeout=20)
    gate.touch()
    await client.retry(handle.task_id)
    assert await handle.wait(timeout=20) == {"passed": True, "input": {"n": 1}}

    events = [event async for event in handle.events(timeout=10)]

    kinds = [(event.kind, event.generation) for event in events]
    assert ("failed", 1) in kinds
    assert kinds[-1] == ("completed", 2), kinds
