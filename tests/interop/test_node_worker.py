"""A Tether worker in Node.js (worker.mjs), written from schemas/README.md alone, serves
tools next to Python workers: tasks mix both languages' steps, branches, child tasks,
retries, dead letters and a SIGKILL mid-step, and read the same as all-Python tasks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.tools import app
from tests.conftest import Raw
from tether import Client, NatsConfig, TaskFailedError, Worker
from tether.testing import eventually

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.mjs"
NODE_TOOLS = ["node_upper", "node_flaky", "node_broken", "node_slow"]
TERMINAL = {"completed", "failed", "cancelled"}

pytestmark = pytest.mark.timeout(60)


class NodeWorker:
    """`node worker.mjs` as a real process (SIGKILL needs one), its output in a log."""

    def __init__(self, node: str, config: NatsConfig, log: Path) -> None:
        self.node, self.config, self.log = node, config, log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                self.node,
                str(WORKER),
                self.config.url,
                self.config.names.prefix,
                *NODE_TOOLS,
                cwd=HERE,
                stdout=asyncio.subprocess.PIPE,
                stderr=out,
                env=dict(os.environ),
            )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=15)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            pytest.fail(f"worker.mjs did not start:\n{self.log.read_text()}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


@pytest.fixture
async def py_worker(config: NatsConfig, dispatcher: object) -> AsyncIterator[Worker]:
    async with Worker(app, config) as w:
        yield w


@pytest.fixture
async def node_worker(
    node: str, config: NatsConfig, dispatcher: object, executions: Path, tmp_path: Path
) -> AsyncIterator[NodeWorker]:
    worker = NodeWorker(node, config, tmp_path / "node-worker.log")
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()
        errors = worker.log.read_text()
        assert "node worker:" not in errors, f"worker.mjs reported errors:\n{errors}"


async def events(raw: Raw, config: NatsConfig, task_id: str) -> list[dict[str, Any]]:
    """Every status event of the task, raw, in stream order, once it has ended."""

    async def read() -> list[dict[str, Any]]:
        names = config.names
        sub = await raw.js.subscribe(
            names.status_subject(task_id), stream=names.status_stream, ordered_consumer=True
        )
        seen: list[dict[str, Any]] = []
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=0.3)
                except TimeoutError:
                    break
                event = json.loads(msg.data)
                event["_msg_id"] = (msg.headers or {}).get("Nats-Msg-Id")
                seen.append(event)
        finally:
            await sub.unsubscribe()
        assert seen and seen[-1]["event"] in TERMINAL, seen
        return seen

    seen: list[dict[str, Any]] = await eventually(read)
    return seen


def pairs(seen: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["event"], e["step"]) for e in seen]


def executions_of(path: Path, task_id: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        tid, where, *_ = line.split()
        if tid == task_id:
            counts[where] += 1
    return counts


NORMAL_3 = [
    ("submitted", None),
    ("step_started", 0),
    ("step_completed", 0),
    ("step_started", 1),
    ("step_completed", 1),
    ("step_started", 2),
    ("step_completed", 2),
    ("completed", None),
]


async def test_plain_steps_python_node_python_and_the_listing(
    client: Client,
    raw: Raw,
    config: NatsConfig,
    py_worker: Worker,
    node_worker: NodeWorker,
    executions: Path,
) -> None:
    handle = await client.submit(
        [{"tool": "summarize", "input": ["a", "b"]}, {"tool": "node_upper"}, {"tool": "fast"}],
        task_id="mixed-1",
    )
    assert await handle.wait(timeout=15) == {"step": 2, "payload": "A; B"}

    seen = await events(raw, config, "mixed-1")
    assert pairs(seen) == NORMAL_3
    node_done = seen[4]
    assert node_done["tool"] == "node_upper" and node_done["output"] == "A; B"
    assert node_done["attempt"] == 1 and node_done["skipped"] is False
    assert node_done["status"] == "running" and node_done["generation"] == 1
    assert node_done["_msg_id"] == "mixed-1.1.step_completed.g1.0"
    assert seen[3]["_msg_id"] == "mixed-1.1.step_started.g1.1"
    assert seen[3]["status"] == "running"
    assert seen[-2]["status"] == "completed"
    record = await client.get("mixed-1")
    assert record.status == "completed" and record.current_step == 3 and record.done_steps == 2
    assert executions_of(executions, "mixed-1") == {"0": 1, "1": 1, "2": 1}

    # 6. The Node-run task is listed as completed (the status index row moved).
    last = await client.submit([{"tool": "node_upper", "input": "solo"}], task_id="node-only")
    assert await last.wait(timeout=15) == "SOLO"

    async def listed() -> (
        None
    ):  # index rows go out with core NATS, unawaited: a hint that lands soon
        page, _ = await client.list_page("completed")
        assert {r.task_id for r in page} == {"mixed-1", "node-only"}
        assert (await client.list_page("running"))[0] == []

    await eventually(listed, timeout=5)
    cli = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.cli",
        "ls",
        "--status",
        "completed",
        "--json",
        "--nats",
        config.url,
        "--prefix",
        config.names.prefix,
        cwd=HERE.parent.parent,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(cli.communicate(), timeout=20)
    assert cli.returncode == 0, err.decode()
    assert "mixed-1" in out.decode() and "node-only" in out.decode(), out.decode()


@pytest.mark.parametrize("last", ["python", "node"])
async def test_a_parallel_group_with_branches_in_both_languages(
    client: Client,
    raw: Raw,
    config: NatsConfig,
    py_worker: Worker,
    node_worker: NodeWorker,
    executions: Path,
    last: str,
) -> None:
    """The slower branch completes the set, so the fan-in runs on its side."""
    py_sleep, node_sleep = (0.8, 0.0) if last == "python" else (0.0, 0.8)
    task_id = f"group-{last}"
    group = {
        "parallel": [
            {"tool": "slow", "input": {"sleep": py_sleep}},
            {"tool": "node_upper", "input": {"text": "mid"}},
            {"tool": "node_slow", "input": {"sleep": node_sleep}},
        ]
    }
    after = {"tool": "node_upper", "input": "after"} if last == "python" else {"tool": "fast"}
    handle = await client.submit([group, after], task_id=task_id)
    result = await handle.wait(timeout=15)

    outputs = [{"step": 0, "slept": py_sleep}, {"text": "MID"}, {"step": 0, "slept": node_sleep}]
    assert result == ("AFTER" if last == "python" else {"step": 1, "payload": outputs})
    seen = await events(raw, config, task_id)
    branch_done = sorted(
        (e["branch"], e["tool"], e["_msg_id"])
        for e in seen
        if e["event"] == "step_completed" and e["step"] == 0 and e["branch"] is not None
    )
    assert branch_done == [
        (0, "slow", f"{task_id}.0.b0.step_completed.g1.0"),
        (1, "node_upper", f"{task_id}.0.b1.step_completed.g1.0"),
        (2, "node_slow", f"{task_id}.0.b2.step_completed.g1.0"),
    ]
    (group_done,) = [
        e for e in seen if e["event"] == "step_completed" and e["step"] == 0 and e["branch"] is None
    ]
    assert group_done["tool"] is None and group_done["output"] == outputs
    assert group_done["attempt"] is None and group_done["status"] == "running"
    assert [p for p in pairs(seen) if p[1] != 0] == [
        ("submitted", None),
        ("step_started", 1),
        ("step_completed", 1),
        ("completed", None),
    ]
    checkpoint = await raw.js.key_value(config.names.checkpoints_bucket)
    stored = json.loads((await checkpoint.get(f"{task_id}.0")).value or b"null")
    assert stored["output"] == outputs and stored["spec"] == group
    assert executions_of(executions, task_id) == {"0.b0": 1, "0.b1": 1, "0.b2": 1, "1": 1}
    fanned_in_on_node = f"fan-in of {task_id}.0 recorded" in node_worker.log.read_text()
    assert fanned_in_on_node == (last == "node")


async def test_the_last_step_of_a_child_runs_on_node_and_resumes_the_parent(
    client: Client,
    raw: Raw,
    config: NatsConfig,
    py_worker: Worker,
    node_worker: NodeWorker,
    executions: Path,
) -> None:
    child_steps = [
        {"tool": "fast", "input": "c"},
        {"tool": "node_upper", "input": {"text": "child"}},
    ]
    handle = await client.submit(
        [{"tool": "delegates", "input": {"steps": child_steps}}, {"tool": "fast"}],
        task_id="parent-1",
    )
    assert await handle.wait(timeout=15) == {"step": 1, "payload": {"text": "CHILD"}}

    parent = await client.get("parent-1")
    assert parent.children == ["parent-1-s0"] and parent.awaiting is None
    child = await client.get("parent-1-s0")
    assert child.status == "completed" and child.result == {"text": "CHILD"}
    assert (
        child.parent is not None and child.parent.task_id == "parent-1" and child.parent.step == 0
    )
    assert pairs(await events(raw, config, "parent-1-s0")) == [*NORMAL_3[:5], ("completed", None)]
    seen = await events(raw, config, "parent-1")
    assert pairs(seen) == [*NORMAL_3[:5], ("completed", None)]
    resumed = seen[2]
    assert resumed["skipped"] is True and resumed["attempt"] is None
    assert resumed["output"] == {"text": "CHILD"}
    assert executions_of(executions, "parent-1") == {"0": 1, "1": 1}
    assert executions_of(executions, "parent-1-s0") == {"0": 1, "1": 1}


async def test_a_node_retry_and_a_node_dead_letter(
    client: Client,
    raw: Raw,
    config: NatsConfig,
    py_worker: Worker,
    node_worker: NodeWorker,
    executions: Path,
) -> None:
    flaky = await client.submit([{"tool": "node_flaky", "input": "x"}], task_id="flaky-1")
    broken = await client.submit(
        [{"tool": "fast", "input": 1}, {"tool": "node_broken", "input": {}}], task_id="broken-1"
    )

    assert await flaky.wait(timeout=15) == {"attempt": 2, "input": "x"}
    seen = await events(raw, config, "flaky-1")
    assert [(e["event"], e["step"], e["attempt"]) for e in seen] == [
        ("submitted", None, None),
        ("step_started", 0, 1),
        ("step_retrying", 0, 1),
        ("step_started", 0, 2),
        ("step_completed", 0, 2),
        ("completed", None, None),
    ]
    retrying = seen[2]
    assert retrying["error"]["type"] == "FlakyError" and retrying["retry_in_ms"] == 50
    assert retrying["_msg_id"] == "flaky-1.0.step_retrying.g1.1"
    assert executions_of(executions, "flaky-1") == {"0": 2}

    with pytest.raises(TaskFailedError):
        await broken.wait(timeout=15)
    record = await client.get("broken-1")
    assert record.status == "failed" and record.failed_step == 1
    assert record.error is not None and record.error.type == "ServiceDown"
    assert record.error.message == "gave up after 3 attempts: the node service is down"
    seen = await events(raw, config, "broken-1")
    assert [(e["event"], e["step"], e["attempt"]) for e in seen] == [
        ("submitted", None, None),
        ("step_started", 0, 1),
        ("step_completed", 0, 1),
        ("step_started", 1, 1),
        ("step_retrying", 1, 1),
        ("step_started", 1, 2),
        ("step_retrying", 1, 2),
        ("step_started", 1, 3),
        ("failed", 1, 3),
    ]
    assert seen[-1]["error"]["message"] == record.error.message
    assert seen[-1]["_msg_id"] == "broken-1.1.failed.g1.0"
    (letter,) = [d for d in await client.dead_letters() if d.task_id == "broken-1"]
    assert letter.tool == "node_broken" and letter.step == 1 and letter.attempt == 3
    assert letter.error.type == "ServiceDown" and letter.error.message == record.error.message
    assert letter.subject == config.names.work_subject("node_broken")
    assert json.loads(letter.data)["task_id"] == "broken-1"  # msgspec decoded the base64
    assert executions_of(executions, "broken-1") == {"0": 1, "1": 3}


async def test_a_sigkilled_node_worker_is_replaced_and_checkpointed_steps_do_not_run_again(
    client: Client,
    raw: Raw,
    config: NatsConfig,
    py_worker: Worker,
    node_worker: NodeWorker,
    executions: Path,
    node: str,
    tmp_path: Path,
) -> None:
    steps: list[dict[str, Any]] = [
        {"tool": "node_upper", "input": "a"},
        {"tool": "node_slow", "input": {"sleep": 1.5}},
        {"tool": "fast"},
    ]
    handle = await client.submit(steps, task_id="killed-1")

    async def slow_started() -> None:
        assert executions_of(executions, "killed-1")["1"] == 1

    await eventually(slow_started)  # the node_slow step runs; its checkpointed step 0 is behind it
    node_worker.kill()
    assert node_worker.proc is not None
    await node_worker.proc.wait()

    fresh = NodeWorker(node, config, tmp_path / "node-worker-2.log")
    await fresh.start()
    try:
        assert await handle.wait(timeout=20) == {"step": 2, "payload": {"step": 1, "slept": 1.5}}
    finally:
        await fresh.stop()
    assert "node worker:" not in fresh.log.read_text()

    # Step 0 had checkpointed: it ran once. Step 1 ran again, as attempt 2.
    assert executions_of(executions, "killed-1") == {"0": 1, "1": 2, "2": 1}
    seen = await events(raw, config, "killed-1")
    assert [(e["event"], e["step"], e["attempt"]) for e in seen] == [
        ("submitted", None, None),
        ("step_started", 0, 1),
        ("step_completed", 0, 1),
        ("step_started", 1, 1),
        ("step_started", 1, 2),
        ("step_completed", 1, 2),
        ("step_started", 2, 1),
        ("step_completed", 2, 1),
        ("completed", None, None),
    ]
