"""A worker killed (SIGKILL) at each point of the step protocol: nothing runs twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.apps.tools import read_executions
from tests.chaos.crashes import crash, survive
from tether import Client, NatsConfig, TaskHandle

pytestmark = pytest.mark.slow


async def crash_then_survive(
    config: NatsConfig,
    crash_at: str,
    handle: TaskHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """A worker killed at `crash_at`, then a fresh one; the task's result."""
    await crash(config, crash_at, tmp_path, monkeypatch)
    return await survive(config, handle)


@pytest.mark.parametrize(
    ("point", "step"),
    [
        ("checkpointed", 1),
        ("recorded", 1),
        ("handed-off", 1),
        ("recorded", 2),  # the last step: its output is the record's result, not a checkpoint
    ],
)
async def test_redelivery_after_a_crash_reruns_nothing(
    point: str,
    step: int,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_id = f"crash-{point}-{step}"
    handle = await client.submit([{"tool": "fast", "input": 0}, "fast", "fast"], task_id=task_id)

    result = await crash_then_survive(
        config, f"{point}:{task_id}:{step}", handle, tmp_path, monkeypatch
    )

    assert result["step"] == 2
    counts = read_executions(executions)
    assert [counts[(task_id, i)] for i in range(3)] == [1, 1, 1]


async def test_a_side_effect_in_once_does_not_repeat_after_a_crash(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker dies right after `ctx.once` stored a plain function's result."""
    task_id = "crash-once"
    handle = await client.submit([{"tool": "notifies", "input": {}}], task_id=task_id)

    result = await crash_then_survive(
        config, f"memo-stored:{task_id}:0", handle, tmp_path, monkeypatch
    )

    assert result == {"receipt": "sent-1"}
    sends = [line for line in executions.read_text().splitlines() if line.endswith(" send")]
    assert len(sends) == 1, sends


@pytest.mark.parametrize(
    "point",
    [
        "handed-off:-1",  # the child's first step published, the parent not yet waiting on it
        "recorded:0",  # the child completed, its parent not yet told
    ],
)
async def test_a_crash_around_a_child_task_loses_neither(
    point: str,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where, _, step = point.partition(":")
    parent_id = f"family-{where}"
    child_id = f"{parent_id}-s0"
    child_plan = [{"tool": "fast", "input": "from the child"}]
    handle = await client.submit(
        [{"tool": "delegates", "input": {"steps": child_plan}}, "fast"], task_id=parent_id
    )

    result = await crash_then_survive(
        config, f"{where}:{child_id}:{step}", handle, tmp_path, monkeypatch
    )

    assert result == {"step": 1, "payload": {"step": 0, "payload": "from the child"}}
    counts = read_executions(executions)
    assert counts[(child_id, 0)] == 1  # the child's step is never run twice
    assert counts[(parent_id, 1)] == 1
    assert counts[(parent_id, 0)] <= 2  # not checkpointed before the crash: may run again
    assert (await client.get(parent_id)).children == [child_id]
