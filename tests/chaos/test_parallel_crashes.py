"""A worker killed (SIGKILL) inside a parallel step: in the middle of the fan-out, with
branches running, and at the fan-in point. A checkpointed branch never runs again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.apps.tools import read_branch_executions, read_executions
from tests.chaos.crashes import crash, survive
from tether import Client, NatsConfig, Parallel, Step
from tether.nats.store import Store
from tether.schemas.events import StepCompleted

pytestmark = pytest.mark.slow

SLEEPS = [0.8, 0.6, 0.1, 0.5, 0.4]
"""Branch 2 ends first, so a crash at its checkpoint leaves four branches running."""


def plan() -> list[Step]:
    branches = [Step(tool="slow", input={"sleep": s}) for s in SLEEPS]
    return [Step(tool="fast", input=0), Parallel(*branches), Step(tool="fast")]


async def checkpointed_branches(store: Store, task_id: str) -> set[int]:
    found = set()
    for branch in range(len(SLEEPS)):
        if await store.checkpoints.get(task_id, 1, branch) is not None:
            found.add(branch)
    return found


@pytest.mark.parametrize(
    "point",
    [
        "handed-off:0",  # mid fan-out: one branch published, the rest not yet
        "checkpointed:1.b2",  # a branch stored, four still running
        "counted:1.b2",  # the record counted it, its event not yet out
        "checkpointed:1",  # fan-in: the group's checkpoint stored, the record not moved
        "recorded:1",  # the record moved past the group, no event, no hand-off
        "handed-off:1",  # the next step published, the last branch's message not acked
    ],
)
async def test_a_crash_in_a_parallel_step_reruns_at_most_the_running_branches(
    point: str,
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where, _, step = point.partition(":")
    task_id = f"fan-{where}-{step.replace('.', '-')}"
    handle = await client.submit(plan(), task_id=task_id)
    await crash(config, f"{where}:{task_id}:{step}", tmp_path, monkeypatch)
    stored_at_crash = await checkpointed_branches(store, task_id)

    result = await survive(config, handle)

    assert result["step"] == 2
    assert [out["slept"] for out in result["payload"]] == SLEEPS  # branch order, not end order
    branches = read_branch_executions(executions)
    runs = [branches[(task_id, 1, b)] for b in range(len(SLEEPS))]
    assert all(runs[b] == 1 for b in stored_at_crash), (stored_at_crash, runs)
    assert all(1 <= count <= 2 for count in runs), runs
    steps = read_executions(executions)
    assert [steps[(task_id, 0)], steps[(task_id, 2)]] == [1, 1]
    record = await client.get(task_id)
    assert record.done_branches == []
    # every branch's step_completed is out, once, whoever sent it (issue 25's hole: a
    # holder that died between counting its branch and the event left none)
    events = await client.history(task_id)
    completed = Counter((e.step, e.branch) for e in events if isinstance(e, StepCompleted))
    assert [completed[(1, b)] for b in range(len(SLEEPS))] == [1] * len(SLEEPS), completed
