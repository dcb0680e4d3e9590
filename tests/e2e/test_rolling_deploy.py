"""A rolling deploy from v1 to v2 while tasks run, with real `tether worker` processes:
two v1 workers are replaced one by one by two v2 workers, each drained (the default),
while 500 three-step tasks and 50 agent tasks come in. v2 changes `tally`'s output and
`report`'s input (`tests/apps/deploys.py`). Nothing is lost, no step runs twice, no
step gets an input its tool refuses; pinned tasks run every step on the build that
started them, moving tasks go on on v2 where v2 takes their input."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import start_worker, stop_worker
from tether import Client, NatsConfig, TaskHandle, TaskStatus
from tether.schemas import StepStarted
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

APP = "tests.apps.deploys:app"
TASKS, AGENTS, WAVES = 500, 50, 5
LOOKUP = {"tool_calls": [{"name": "lookup", "arguments": {"query": "builds"}}]}
ANSWER = {"content": "Deployed."}


def _start(
    config: NatsConfig, version: str, log: Path, patch: pytest.MonkeyPatch
) -> subprocess.Popen[bytes]:
    patch.setenv("TETHER_TEST_DEPLOY_VERSION", version)
    return start_worker(config, APP, log=log, drain=True)


async def _up(client: Client, build: str, count: int) -> None:
    async def enough() -> bool:
        return sum(w.build == build for w in await client.workers()) >= count

    await wait_until(enough, timeout=30, message=f"{count} worker(s) of build {build} up")


@pytest.mark.parametrize("versioning", ["moving", "pinned"])
async def test_a_rolling_deploy_loses_nothing_and_runs_nothing_twice(
    versioning: str,
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    executions: Path,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_TEST_VERSIONING", versioning)
    monkeypatch.setenv("TETHER_DRAIN_TIMEOUT", "120")  # a slow machine's drain is not cut
    # A worker starved of CPU past its ack wait loses the steps it has not held yet to
    # another (at least once, as documented in `Liveness.step_slack`): not a deploy's doing.
    monkeypatch.setenv("TETHER_STEP_SLACK", "5")
    hold = tmp_path / "hold"  # v1's first steps wait while it exists
    hold.touch()
    monkeypatch.setenv("TETHER_TEST_HOLD", str(hold))
    questions = [f"deploy {uuid.uuid4().hex[:8]}" for _ in range(AGENTS)]
    model.load({"conversations": [{"match": q, "turns": [LOOKUP, ANSWER]} for q in questions]})
    v1 = [_start(config, "v1", tmp_path / f"v1-{i}.log", monkeypatch) for i in range(2)]
    v2: list[subprocess.Popen[bytes]] = []
    handles: list[TaskHandle] = []
    agents: list[TaskHandle] = []
    try:
        await _up(client, "v1", 2)

        async def wave(n: int) -> None:
            per = TASKS // WAVES
            for i in range(n * per, (n + 1) * per):
                steps = [{"tool": "count", "input": i}, "tally", "report"]
                handles.append(await client.submit(steps))
            for question in questions[n * AGENTS // WAVES : (n + 1) * AGENTS // WAVES]:
                agents.append(await client.submit_agent("deployer", question))

        await wave(0)  # started on v1, in flight as v2 comes
        for i, old in enumerate(v1):  # one by one: a v2 up, then a v1 drained away
            v2.append(_start(config, "v2", tmp_path / f"v2-{i}.log", monkeypatch))
            await wave(2 * i + 1)
            await _up(client, "v2", i + 1)
            hold.unlink(missing_ok=True)
            old.terminate()  # drains: SIGTERM
            await wave(2 * i + 2)
            await asyncio.to_thread(old.wait, 60)
        results = await asyncio.gather(*(h.wait(timeout=90) for h in handles))
        answers = await asyncio.gather(*(a.wait(timeout=90) for a in agents))
    finally:
        for worker in v1:
            if worker.poll() is None:
                worker.kill()
        for worker in v2:
            stop_worker(worker)

    assert [r.split(" by ")[0] for r in results] == [str(i) for i in range(TASKS)]
    # v2 said at start how it does not fit v1, and `tether builds` lists it
    assert "tool 'tally' of build v2 does not fit build v1" in (tmp_path / "v2-0.log").read_text()
    v2_row = next(row for row in (await client.builds()).builds if row.build == "v2")
    assert v2_row.before == "v1" and {"tally", "report"} <= set(v2_row.changes)
    assert answers == [ANSWER["content"]] * AGENTS
    runs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in executions.read_text().splitlines():
        task_id, step, _attempt, _pid, build = line.split()
        runs[(task_id, step)].append(build)
    twice = {key: builds for key, builds in runs.items() if len(builds) > 1}
    assert not twice, f"steps that ran twice: {sorted(twice.items())[:5]}"
    builds = [[runs[(h.task_id, str(s))][0] for s in range(3)] for h in handles]
    records = [await h.get() for h in handles]
    assert [r.build for r in records] == [b[0] for b in builds]  # the build that started it
    assert all(r.status is TaskStatus.COMPLETED for r in records)
    # the last step ran where its input was made: v2's report never got v1's shape
    assert all(b[2] == b[1] for b in builds)
    started_on_v1 = [b for b in builds if b[0] == "v1"]
    assert started_on_v1 and any(b[0] == "v2" for b in builds)
    if versioning == "pinned":
        assert all(b == [b[0]] * 3 for b in builds)
    else:
        assert any(b[1] == "v2" for b in started_on_v1), "no task moved on to v2"
        backwards = [b for b in builds if "v2" in b and b[b.index("v2") :].count("v1")]
        where = [i for i, b in enumerate(builds) if b in backwards]
        assert not backwards, (
            f"steps back on v1 after v2: {backwards[:5]} of {len(backwards)} {where}"
        )
    for question, agent in zip(questions, agents, strict=True):
        calls = model.requests(question)
        assert [(c["turn"], c["attempt"]) for c in calls] == [(0, 0), (1, 0)]
        turns = [
            e.build
            async for e in agent.events(timeout=5)
            if isinstance(e, StepStarted) and e.tool == "deployer"
        ]
        if versioning == "pinned" and len(set(turns)) != 1:
            everything = [
                (e.kind, e.step, e.branch, e.tool, e.attempt, e.build, str(e.time))
                async for e in agent.events(timeout=5)
            ]
            raise AssertionError(f"a pinned conversation changed build: {turns} {everything}")
