"""Fork: a new task that reuses a task's checkpoints before a step and runs from there.

Through the client, the request/reply API (`<prefix>.api.fork`, raw NATS) and the CLI
(`tether fork`): the steps before `from_step` never run again for the new task, the
source task is left as it was, a new input reaches the step's tool, and a fork from a
step that did not run (or is not in the plan) creates nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.apps.tools import app, read_branch_executions, read_executions
from tests.conftest import MakeWorker, Raw
from tests.e2e.test_cli_ops import tether
from tether import (
    Client,
    InvalidTaskError,
    NatsConfig,
    Parallel,
    Step,
    TaskCancelledError,
    TaskExistsError,
    TaskFailedError,
    TaskNotFoundError,
)
from tether.nats.store import Store
from tether.schemas import TaskStatus
from tether.testing import eventually

THREE = [{"tool": "fast", "input": 1}, {"tool": "fast"}, {"tool": "fast"}]
THREE_RESULT = {"step": 2, "payload": {"step": 1, "payload": {"step": 0, "payload": 1}}}


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the `gated` tool needs to pass (absent: it fails for good)."""
    path = tmp_path / "gate"
    monkeypatch.setenv("TETHER_TEST_GATE", str(path))
    return path


# -- helpers ----------------------------------------------------------------------------


def counts_of(executions: Path, task_id: str, steps: int) -> list[int]:
    counts = read_executions(executions)
    return [counts[(task_id, step)] for step in range(steps)]


def lines_of(executions: Path, task_id: str) -> list[str]:
    """The execution log's lines of one task (the source's must not change on a fork)."""
    return [line for line in executions.read_text().splitlines() if line.split()[0] == task_id]


async def checkpoint_keys(store: Store, task_id: str) -> list[str]:
    keys = await store.keys(store.names.checkpoints_bucket)
    return sorted(key for key in keys if key.split(".")[0] == task_id)


async def assert_not_created(client: Client, store: Store, task_id: str) -> None:
    with pytest.raises(TaskNotFoundError):
        await client.get(task_id)
    assert await checkpoint_keys(store, task_id) == []


async def completed(client: Client, steps: list[Any], task_id: str, **kwargs: Any) -> Any:
    handle = await client.submit(steps, task_id=task_id, **kwargs)
    return await handle.wait(timeout=10)


# -- forks of finished tasks --------------------------------------------------------------


async def test_fork_of_a_completed_task_reuses_the_steps_before_and_leaves_the_source(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    assert await completed(client, THREE, "src", metadata={"user": "alice"}) == THREE_RESULT
    source_before = await client.get("src")
    source_plan = await client.handle("src").plan()
    source_lines = lines_of(executions, "src")
    source_keys = await checkpoint_keys(store, "src")

    handle = await client.fork("src", 1, new_task_id="copy")

    assert handle.task_id == "copy"
    assert await handle.wait(timeout=10) == THREE_RESULT  # step 1 got step 0's copied output
    assert counts_of(executions, "copy", 3) == [0, 1, 1]
    record = await handle.get()
    assert record.status is TaskStatus.COMPLETED
    assert record.metadata == {"user": "alice", "forked_from": {"task_id": "src", "step": 1}}
    assert await handle.plan() == source_plan
    # The source: same record, same executions, same checkpoints.
    assert await client.get("src") == source_before
    assert lines_of(executions, "src") == source_lines
    assert await checkpoint_keys(store, "src") == source_keys
    assert (await client.get("src")).metadata == {"user": "alice"}

    # A fork of the fork: step 0 is a copy of a copy, still not run again.
    second = await client.fork("copy", 2, input="last", new_task_id="copy-2")
    assert await second.wait(timeout=10) == {"step": 2, "payload": "last"}
    assert counts_of(executions, "copy-2", 3) == [0, 0, 1]
    assert (await second.get()).metadata == {
        "user": "alice",
        "forked_from": {"task_id": "copy", "step": 2},
    }
    assert [s.tool for s in await second.plan()] == ["fast", "fast", "fast"]


async def test_fork_with_a_new_input_hands_it_to_the_step_and_later_steps_see_old_outputs(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    plan = [{"tool": "search", "input": {"query": "AI trends 2026"}}, "summarize", "write_report"]
    original = await completed(client, plan, "report")
    assert original["sources"] == 3

    handle = await client.fork("report", 2, input="a different summary")

    result = await handle.wait(timeout=10)
    # write_report read the new input, and ctx.outputs() found the copied step 0 output.
    assert result == {"report": "# Report\n\na different summary\n", "sources": 3}
    assert handle.task_id != "report"
    assert counts_of(executions, handle.task_id, 3) == [0, 0, 1]
    plan_after = await handle.plan()
    assert plan_after[2].input == "a different summary"
    assert [s.tool for s in plan_after] == ["search", "summarize", "write_report"]
    assert (await client.handle("report").plan())[2].input is None  # the source's plan stays


async def test_fork_from_step_zero_runs_every_step_again(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    await completed(client, THREE, "zero-src")

    handle = await client.fork("zero-src", 0, input="fresh", new_task_id="zero")

    assert await handle.wait(timeout=10) == {
        "step": 2,
        "payload": {"step": 1, "payload": {"step": 0, "payload": "fresh"}},
    }
    assert counts_of(executions, "zero", 3) == [1, 1, 1]
    assert counts_of(executions, "zero-src", 3) == [1, 1, 1]
    assert (await handle.get()).metadata == {"forked_from": {"task_id": "zero-src", "step": 0}}


async def test_fork_of_a_failed_task_from_its_failed_step_after_the_fix(
    client: Client,
    store: Store,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
    gate: Path,
) -> None:
    await make_worker(app)
    source = await client.submit([{"tool": "fast", "input": "kept"}, "gated"], task_id="failing")
    with pytest.raises(TaskFailedError):
        await source.wait(timeout=10)
    failed = await source.get()
    assert (failed.status, failed.failed_step) == (TaskStatus.FAILED, 1)
    with pytest.raises(InvalidTaskError):  # step 1 is the last step that ran
        await client.fork("failing", 2, new_task_id="too-far")
    await assert_not_created(client, store, "too-far")
    early = await client.fork("failing", 1, new_task_id="early")  # the gate is still closed
    with pytest.raises(TaskFailedError):
        await early.wait(timeout=10)

    gate.touch()  # the fix
    handle = await client.fork("failing", 1, input="new", new_task_id="fixed")
    await client.retry("early")  # a failed fork retries from its failed step too

    assert await handle.wait(timeout=10) == {"passed": True, "input": "new"}
    assert await early.wait(timeout=10) == {"passed": True, "input": {"step": 0, "payload": "kept"}}
    assert counts_of(executions, "fixed", 2) == [0, 1]
    assert counts_of(executions, "early", 2) == [0, 2]
    assert counts_of(executions, "failing", 2) == [1, 1]
    assert (await source.get()) == failed  # the source is neither retried nor changed


# -- refusals -------------------------------------------------------------------------------


async def test_a_step_outside_the_plan_is_refused_and_creates_nothing(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    await completed(client, THREE, "done")
    before = await client.get("done")

    for from_step in (-1, 3, 4):
        with pytest.raises(InvalidTaskError):
            await client.fork("done", from_step, new_task_id="nope")

    await assert_not_created(client, store, "nope")
    assert await client.get("done") == before
    assert counts_of(executions, "done", 3) == [1, 1, 1]


async def test_a_cancelled_task_forks_up_to_its_current_step_only(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    plan = [{"tool": "fast", "input": 1}, {"tool": "slow", "input": {"sleep": 30}}, "fast"]
    source = await client.submit(plan, task_id="stopped")
    await eventually(lambda: _executed(executions, "stopped", 1))
    await source.cancel()
    with pytest.raises(TaskCancelledError):
        await source.wait(timeout=5)
    assert (await source.get()).current_step == 1

    with pytest.raises(InvalidTaskError):  # step 1 never completed: step 2 cannot start
        await client.fork("stopped", 2, new_task_id="past")
    await assert_not_created(client, store, "past")

    handle = await client.fork("stopped", 1, input={"sleep": 0}, new_task_id="resumed")
    assert await handle.wait(timeout=10) == {"step": 2, "payload": {"step": 1, "slept": 0}}
    assert counts_of(executions, "resumed", 3) == [0, 1, 1]


async def test_an_existing_new_id_and_an_unknown_source_are_refused(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    await completed(client, THREE, "a")
    await completed(client, [{"tool": "fast", "input": "other"}], "b")
    b_before = await client.get("b")
    b_keys = await checkpoint_keys(store, "b")

    with pytest.raises(TaskExistsError):
        await client.fork("a", 1, new_task_id="b")
    with pytest.raises(TaskExistsError):
        await client.fork("a", 1, new_task_id="a")
    with pytest.raises(TaskNotFoundError):
        await client.fork("missing", 0, new_task_id="c")
    with pytest.raises(InvalidTaskError):
        await client.fork("a", 1, new_task_id="bad.id")

    assert await client.get("b") == b_before
    assert await checkpoint_keys(store, "b") == b_keys
    await assert_not_created(client, store, "c")
    assert [key for key in await _all_checkpoint_keys(store) if key.startswith("bad")] == []
    assert counts_of(executions, "b", 1) == [1]


# -- parallel groups and plans the tools extended -------------------------------------------


async def test_fork_after_a_parallel_group_reuses_its_outputs_and_runs_no_branch(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    group = Parallel(Step(tool="fast", input="x"), Step(tool="fast", input="y"))
    source = await client.submit([{"tool": "fast", "input": 0}, group, "fast"], task_id="fan")
    original = await source.wait(timeout=10)
    outputs = [{"step": 1, "payload": "x"}, {"step": 1, "payload": "y"}]
    assert original == {"step": 2, "payload": outputs}
    with pytest.raises(InvalidTaskError):  # a group takes no input of its own
        await client.fork("fan", 1, input="z", new_task_id="fan-input")
    await assert_not_created(client, store, "fan-input")

    handle = await client.fork("fan", 2, new_task_id="fan-2")

    assert await handle.wait(timeout=10) == {"step": 2, "payload": outputs}
    assert counts_of(executions, "fan-2", 3) == [0, 0, 1]
    branches = read_branch_executions(executions)
    assert [branches[("fan-2", 1, b)] for b in (0, 1)] == [0, 0]
    assert [branches[("fan", 1, b)] for b in (0, 1)] == [1, 1]
    assert await handle.plan() == await source.plan()

    again = await client.fork("fan", 1, new_task_id="fan-1")  # the group itself runs again
    assert await again.wait(timeout=10) == {"step": 2, "payload": outputs}
    branches = read_branch_executions(executions)
    assert [branches[("fan-1", 1, b)] for b in (0, 1)] == [1, 1]
    assert counts_of(executions, "fan-1", 3) == [0, 0, 1]


async def test_fork_from_a_step_a_tool_added_keeps_the_extended_plan(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    await completed(client, [{"tool": "plans", "input": {}}, {"tool": "fast", "input": "end"}], "p")
    source_plan = await client.handle("p").plan()
    assert [s.tool for s in source_plan] == ["plans", "fast", "fast", "summarize", "fast"]

    handle = await client.fork("p", 2, input={"call": 20}, new_task_id="p2")

    assert await handle.wait(timeout=10) == {"step": 4, "payload": "end"}
    assert counts_of(executions, "p2", 5) == [0, 0, 1, 1, 1]
    plan = await handle.plan()
    assert [s.tool for s in plan] == [s.tool for s in source_plan]
    assert [s.input for s in plan] == [{}, {"call": 1}, {"call": 20}, ["a", "b"], "end"]


async def test_fork_from_the_step_that_extended_the_plan_does_not_repeat_its_steps(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(app)
    await completed(client, [{"tool": "plans", "input": {}}, {"tool": "fast", "input": "end"}], "q")
    source_plan = await client.handle("q").plan()

    handle = await client.fork("q", 0, new_task_id="q0")

    assert await handle.wait(timeout=10) == {"step": 4, "payload": "end"}
    assert [s.tool for s in await handle.plan()] == [s.tool for s in source_plan]
    assert counts_of(executions, "q0", 8) == [1, 1, 1, 1, 1, 0, 0, 0]


# -- the API verb and the CLI ----------------------------------------------------------------


async def test_the_api_fork_verb_replies_with_the_new_record_or_a_typed_error(
    client: Client,
    store: Store,
    raw: Raw,
    config: NatsConfig,
    api: object,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(app)
    await completed(client, THREE, "api-src", metadata={"team": "x"})
    subject = config.names.api_subject("fork")

    async def call(body: dict[str, Any]) -> Any:
        reply = await raw.nc.request(subject, json.dumps(body).encode(), timeout=5)
        return json.loads(reply.data)

    reply = await call({"task_id": "api-src", "from_step": 2, "input": 7, "new_task_id": "api"})

    assert "task_id" in reply, reply
    assert reply["task_id"] == "api" and reply["current_step"] == 2
    assert reply["status"] in ("pending", "running", "completed")
    assert reply["metadata"] == {"team": "x", "forked_from": {"task_id": "api-src", "step": 2}}
    assert await client.handle("api").wait(timeout=10) == {"step": 2, "payload": 7}
    assert counts_of(executions, "api", 3) == [0, 0, 1]

    missing = await call({"task_id": "ghost", "from_step": 0})
    assert missing["error"]["code"] == "not_found", missing
    taken = await call({"task_id": "api-src", "from_step": 0, "new_task_id": "api"})
    assert taken["error"]["code"] == "already_exists", taken
    beyond = await call({"task_id": "api-src", "from_step": 3, "new_task_id": "api-3"})
    assert beyond["error"]["code"] == "invalid", beyond
    await assert_not_created(client, store, "api-3")


async def test_the_cli_forks_and_waits_for_the_new_task(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(app)
    await completed(client, THREE, "cli-src")

    args = ["fork", "cli-src", "--from-step", "1", "--input", '{"n": 5}', "--id", "cli-new"]
    run = await tether(config, *args, "--wait", "--json")

    assert run[0] == 0, run
    record, *events = [json.loads(line) for line in run[1].splitlines()]
    assert record["task_id"] == "cli-new" and record["current_step"] >= 1  # may have run on
    assert record["metadata"] == {"forked_from": {"task_id": "cli-src", "step": 1}}
    assert events[-1]["event"] == "completed", events
    assert events[-1]["output"] == {"step": 2, "payload": {"step": 1, "payload": {"n": 5}}}
    assert counts_of(executions, "cli-new", 3) == [0, 1, 1]


# -- small helpers ---------------------------------------------------------------------------


async def _all_checkpoint_keys(store: Store) -> list[str]:
    return await store.keys(store.names.checkpoints_bucket)


async def _executed(executions: Path, task_id: str, step: int) -> None:
    assert read_executions(executions)[(task_id, step)] >= 1
