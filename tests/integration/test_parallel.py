"""Parallel steps on a real nats-server: fan-out, fan-in, failures, cancel, retry, raw JSON."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.errors import KeyNotFoundError

from tests.apps.tools import app, read_branch_executions, read_executions, record
from tests.conftest import MakeWorker, Raw, inline_only
from tether import (
    App,
    Client,
    InvalidTaskError,
    NatsConfig,
    NextSteps,
    Parallel,
    Step,
    StepContext,
    TaskCancelledError,
    TaskFailedError,
    TerminalError,
    Worker,
)
from tether.nats.store import Store
from tether.schemas import (
    Cancelled,
    DeadLetter,
    Failed,
    StepCompleted,
    StepRetrying,
    StepStarted,
    TaskStatus,
)
from tether.schemas.events import AnyStatusEvent
from tether.schemas.names import Names
from tether.testing import eventually, wait_until

# -- tools of this module (besides tests.apps.tools) ------------------------------------

parallel_app = App("parallel")
RELEASES: dict[tuple[str, int | None], asyncio.Event] = {}
OPEN: set[str] = set()
STOPPED: list[tuple[str, int, int | None, int]] = []


def release(task_id: str, branch: int) -> None:
    """Let the `held` branch `branch` of `task_id` go on (now or when it starts)."""
    RELEASES.setdefault((task_id, branch), asyncio.Event()).set()


@parallel_app.tool(heartbeat=600)
async def held(ctx: StepContext, data: Any) -> Any:
    """Waits until the test releases it, then fails for good unless its task is OPEN.
    Its heartbeat is too slow to notice a cancel: only the cancel notice stops it."""
    record(ctx)
    gate = RELEASES.setdefault((ctx.task_id, ctx.branch), asyncio.Event())
    try:
        await gate.wait()
    except asyncio.CancelledError:
        STOPPED.append((ctx.task_id, ctx.step, ctx.branch, ctx.attempt))
        raise
    if ctx.task_id not in OPEN:
        raise TerminalError("held closed")
    return {"input": data, "attempt": ctx.attempt}


@parallel_app.tool(heartbeat=0.5)
async def fans_out(ctx: StepContext, data: Any) -> Any:
    """Like an LLM turn asking for three tool calls at once."""
    record(ctx)
    return NextSteps(
        output={"planned": True},
        steps=[
            Parallel(
                Step(tool="fast", input="a"),
                "fast",
                Step(tool="slow", input={"sleep": 0.2}),
            )
        ],
    )


@parallel_app.tool(heartbeat=0.5)
async def fans_out_nested(ctx: StepContext, data: Any) -> Any:
    """Asks for a group inside a group, which a plan may not have."""
    record(ctx)
    return NextSteps(output=1, steps=[Parallel(Parallel("fast"), "fast")])


@parallel_app.tool(heartbeat=600)
async def stubborn(ctx: StepContext, data: Any) -> Any:
    """Ignores a cancel: when stopped it returns anyway, so its output is checkpointed
    after its task has ended (as a worker that missed the notice would)."""
    record(ctx)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        STOPPED.append((ctx.task_id, ctx.step, ctx.branch, ctx.attempt))
    return {"stubborn": data}


APPS = [app, parallel_app]


# -- helpers ----------------------------------------------------------------------------


async def all_events(client: Client, task_id: str) -> list[AnyStatusEvent]:
    return [e async for e in client.handle(task_id).events(timeout=5)]


def completions(events: list[AnyStatusEvent]) -> list[StepCompleted]:
    return [e for e in events if isinstance(e, StepCompleted)]


async def dead_letters(raw: Raw, names: Names, tool: str, task_id: str) -> list[DeadLetter]:
    sub = await raw.js.subscribe(names.dead_letter_subject(tool), ordered_consumer=True)
    letters = []
    try:
        while True:
            msg = await sub.next_msg(timeout=0.5)
            letter = msgspec.json.decode(msg.data, type=DeadLetter)
            if letter.task_id == task_id:
                letters.append(letter)
    except TimeoutError:
        return letters
    finally:
        await sub.unsubscribe()


async def checkpoint_json(raw: Raw, names: Names, key: str) -> Any:
    """The checkpoint under `key`, read raw from the KV bucket (None when there is none)."""
    kv = await raw.js.key_value(names.checkpoints_bucket)
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    assert entry.value is not None
    return json.loads(entry.value)


async def raw_events(raw: Raw, names: Names, task_id: str, until: str) -> list[dict[str, Any]]:
    """The task's status events as JSON, from the start of its log to the first `until`."""
    sub = await raw.js.subscribe(names.status_subject(task_id), ordered_consumer=True)
    events: list[dict[str, Any]] = []
    try:
        while not events or events[-1]["event"] != until:
            events.append(json.loads((await sub.next_msg(timeout=5)).data))
    finally:
        await sub.unsubscribe()
    return events


async def consumer_idle(raw: Raw, names: Names, tool: str) -> None:
    info = await raw.js.consumer_info(names.work_stream, names.tool_consumer(tool))
    assert info.num_ack_pending == 0 and info.num_pending == 0, info


async def branch_ran(executions: Path, task_id: str, step: int, branch: int) -> None:
    assert read_branch_executions(executions)[(task_id, step, branch)] >= 1


# -- the happy path ---------------------------------------------------------------------


async def test_outputs_come_in_branch_order_whatever_order_branches_finish(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(APPS)
    handle = await client.submit(
        [
            Parallel(
                Step(tool="slow", input={"sleep": 0.5}),
                Step(tool="fast", input=1),
                Step(tool="slow", input={"sleep": 0.1}),
                "fast",
            )
        ]
    )

    result = await handle.wait(timeout=15)

    assert result == [
        {"step": 0, "slept": 0.5},
        {"step": 0, "payload": 1},
        {"step": 0, "slept": 0.1},
        {"step": 0, "payload": None},  # a first step's branch without input gets none
    ]
    done = [e.branch for e in completions(await all_events(client, handle.task_id))]
    assert done.index(1) < done.index(0), f"branch 0 (0.5 s) finished first? {done}"
    names = store.names
    tid = handle.task_id
    branch_1 = await checkpoint_json(raw, names, f"{tid}.0.b1")
    assert branch_1 is not None and branch_1["output"] == {"step": 0, "payload": 1}
    group = await checkpoint_json(raw, names, f"{tid}.0")
    assert group is not None and group["output"] == result
    record_ = await handle.get()
    assert record_.status is TaskStatus.COMPLETED and record_.done_branches == []


async def test_a_branch_without_input_gets_the_previous_output_and_each_runs_once(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(APPS)
    handle = await client.submit(
        [
            {"tool": "fast", "input": "seed"},
            {"parallel": [{"tool": "fast"}, {"tool": "fast", "input": "own"}]},
            "fast",
        ]
    )

    result = await handle.wait(timeout=15)

    group_output = [
        {"step": 1, "payload": {"step": 0, "payload": "seed"}},
        {"step": 1, "payload": "own"},
    ]
    assert result == {"step": 2, "payload": group_output}
    tid = handle.task_id
    assert await store.checkpoints.get(tid, 1) is not None
    steps = read_executions(executions)
    assert (steps[(tid, 0)], steps[(tid, 1)], steps[(tid, 2)]) == (1, 0, 1)
    branches = read_branch_executions(executions)
    assert branches == {(tid, 1, 0): 1, (tid, 1, 1): 1}


async def test_branch_events_carry_the_branch_and_its_tool(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(APPS)
    handle = await client.submit(
        [
            Parallel(
                Step(tool="fast", input=1),
                Step(tool="flaky", input={"succeed_on": 2}),
                Step(tool="slow", input={"sleep": 0.1}),
            ),
            "fast",
        ]
    )
    await handle.wait(timeout=15)

    events = await all_events(client, handle.task_id)

    started = {(e.branch, e.tool, e.attempt) for e in events if isinstance(e, StepStarted)}
    assert started == {
        (0, "fast", 1),
        (1, "flaky", 1),
        (1, "flaky", 2),
        (2, "slow", 1),
        (None, "fast", 1),
    }
    assert all(e.step == 0 for e in events if isinstance(e, StepStarted) and e.branch is not None)
    retrying = [e for e in events if isinstance(e, StepRetrying)]
    assert [(e.step, e.branch, e.tool, e.attempt) for e in retrying] == [(0, 1, "flaky", 1)]
    done = [e for e in completions(events) if e.step == 0]
    by_branch = {e.branch: e for e in done}
    assert sorted(by_branch, key=lambda b: -1 if b is None else b) == [None, 0, 1, 2]
    assert len(done) == 4, "one step_completed per branch and one for the group"
    assert by_branch[0].tool == "fast" and by_branch[0].output == {"step": 0, "payload": 1}
    assert by_branch[1].tool == "flaky" and by_branch[1].output == {"attempt": 2}
    assert by_branch[2].tool == "slow" and by_branch[2].output == {"step": 0, "slept": 0.1}
    group = by_branch[None]
    assert group.output == [by_branch[b].output for b in range(3)]
    assert events.index(group) > max(events.index(by_branch[b]) for b in range(3))
    assert read_branch_executions(executions)[(handle.task_id, 0, 1)] == 2


async def test_twenty_branches_on_one_worker_with_four_slots(
    config: NatsConfig, client: Client, dispatcher: object, executions: Path
) -> None:
    async with Worker(APPS, config, concurrency=4):
        handle = await client.submit([Parallel(*(Step(tool="fast", input=i) for i in range(20)))])
        result = await handle.wait(timeout=20)

    assert [out["payload"] for out in result] == list(range(20))
    tid = handle.task_id
    assert read_branch_executions(executions) == {(tid, 0, b): 1 for b in range(20)}
    events = await all_events(client, tid)
    assert sorted(e.branch for e in completions(events) if e.branch is not None) == list(range(20))


# -- failures ---------------------------------------------------------------------------


async def test_a_branch_that_fails_for_good_fails_the_task_and_stops_its_siblings(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(APPS)
    started = time.monotonic()
    handle = await client.submit(
        [
            Parallel(
                Step(tool="slow", input={"sleep": 30}),
                Step(tool="held", input={}),
                Step(tool="broken", input={}),
            ),
            "fast",
        ]
    )
    tid = handle.task_id

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)

    assert time.monotonic() - started < 10, "the task waited for its slow sibling"
    assert failure.value.error is not None and failure.value.error.type == "ValueError"
    assert "gave up after 3 attempts: the service is down" in failure.value.error.message
    record_ = await handle.get()
    assert record_.status is TaskStatus.FAILED and record_.failed_step == 0
    names = store.names
    letters = await eventually(lambda: _letters(raw, names, "broken", tid))
    assert [(d.step, d.branch, d.attempt) for d in letters] == [(0, 2, 3)]
    # The siblings let go of their messages without completing.
    await eventually(lambda: consumer_idle(raw, names, "slow"), timeout=5)
    await eventually(lambda: consumer_idle(raw, names, "held"), timeout=5)
    if read_branch_executions(executions)[(tid, 0, 1)]:
        assert (tid, 0, 1, 1) in STOPPED
    assert await store.checkpoints.get(tid, 0, 0) is None
    assert await store.checkpoints.get(tid, 0, 1) is None
    events = await all_events(client, tid)
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert (failed.step, failed.branch, failed.tool) == (0, 2, "broken")
    assert not [e for e in completions(events) if e.branch in (0, 1)]
    assert read_executions(executions)[(tid, 1)] == 0


async def _letters(raw: Raw, names: Names, tool: str, task_id: str) -> list[DeadLetter]:
    letters = await dead_letters(raw, names, tool, task_id)
    assert letters, f"no dead letter for {task_id}"
    return letters


async def test_collect_errors_leaves_each_failure_in_its_place_and_the_task_goes_on(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(APPS)
    handle = await client.submit(
        [
            Parallel(
                Step(tool="fast", input=1),
                Step(tool="broken", input={}),
                Step(tool="search", input={"wrong": 1}),
                Step(tool="hangs", input={}),
                {
                    "tool": "slow",
                    "input": {"sleep": 5},
                    "timeout_ms": 100,
                    "retry": {"max_attempts": 1},
                },
                collect_errors=True,
            ),
            "fast",
        ]
    )

    result = await handle.wait(timeout=20)

    outputs = result["payload"]
    assert result["step"] == 1 and len(outputs) == 5
    assert outputs[0] == {"step": 0, "payload": 1}
    assert outputs[1] == {
        "error": {"type": "ValueError", "message": "gave up after 3 attempts: the service is down"}
    }
    assert outputs[2]["error"]["type"] == "InvalidInput"
    assert outputs[3]["error"]["type"] == "StepTimeout"
    assert "gave up after 2 attempts" in outputs[3]["error"]["message"]
    assert outputs[4]["error"]["type"] == "StepTimeout"
    assert "timed out after 0.1s" in outputs[4]["error"]["message"]  # the branch's override
    record_ = await handle.get()
    assert record_.status is TaskStatus.COMPLETED and record_.error is None
    branches = read_branch_executions(executions)
    tid = handle.task_id
    assert [branches[(tid, 0, b)] for b in range(5)] == [1, 3, 0, 2, 1]
    assert not [e for e in await all_events(client, tid) if isinstance(e, Failed)]


async def test_a_terminal_error_fails_the_task_even_when_the_group_collects_errors(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    """TerminalError is a tool's way to stop the whole run (an agent's tool calls are such
    a group): it is not collected as a result."""
    await make_worker(APPS)
    group = Parallel(
        Step(tool="fast", input=1), Step(tool="refuses", input={}), collect_errors=True
    )
    handle = await client.submit([group, "fast"])

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=15)
    error = failure.value.error
    assert error is not None and (error.type, error.message) == (
        "TerminalError",
        "permission denied",
    )
    assert (await handle.get()).failed_step == 0


async def test_a_branch_may_not_extend_the_plan(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    """(A branch may ask for input: its question waits in a child task, see
    test_sub_agents.py.)"""
    await make_worker(APPS)
    tool = "plans"
    handle = await client.submit([Parallel(Step(tool="fast", input=1), Step(tool=tool, input={}))])

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=15)

    assert failure.value.error is not None and failure.value.error.type == "InvalidOutput"
    record_ = await handle.get()
    assert record_.status is TaskStatus.FAILED and record_.failed_step == 0
    assert record_.input_request is None and len(record_.steps) == 1
    letters = await eventually(lambda: _letters(raw, store.names, tool, handle.task_id))
    assert [(d.step, d.branch) for d in letters] == [(0, 1)]


# -- cancel -----------------------------------------------------------------------------


async def test_cancel_stops_every_running_branch(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(APPS)
    handle = await client.submit(
        [
            Parallel(
                Step(tool="slow", input={"sleep": 30}),
                Step(tool="held", input={}),
                Step(tool="fast", input=1),
            ),
            "fast",
        ]
    )
    tid = handle.task_id
    await handle.wait_for(lambda r: r.done_branches == [2], timeout=10)
    await eventually(lambda: branch_ran(executions, tid, 0, 0))
    await eventually(lambda: branch_ran(executions, tid, 0, 1))

    await handle.cancel()

    with pytest.raises(TaskCancelledError):
        await handle.wait(timeout=5)
    await wait_until(lambda: (tid, 0, 1, 1) in STOPPED, timeout=3, message="held to be stopped")
    names = store.names
    await eventually(lambda: consumer_idle(raw, names, "slow"), timeout=3)
    await eventually(lambda: consumer_idle(raw, names, "held"), timeout=3)
    assert await store.checkpoints.get(tid, 0, 0) is None
    assert await store.checkpoints.get(tid, 0, 1) is None
    assert await store.checkpoints.get(tid, 0) is None
    record_ = await handle.get()
    assert record_.status is TaskStatus.CANCELLED and record_.done_branches == [2]
    events = await all_events(client, tid)
    assert isinstance(events[-1], Cancelled)
    assert [e.branch for e in completions(events)] == [2]
    assert read_executions(executions)[(tid, 1)] == 0


# -- dynamic plans ----------------------------------------------------------------------


async def test_a_tool_can_append_a_parallel_group(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(APPS)
    handle = await client.submit([Step(tool="fans_out", input={}), "fast"])

    result = await handle.wait(timeout=15)

    group_output = [
        {"step": 1, "payload": "a"},
        {"step": 1, "payload": {"planned": True}},
        {"step": 1, "slept": 0.2},
    ]
    assert result == {"step": 2, "payload": group_output}
    tid = handle.task_id
    events = await all_events(client, tid)
    done = {(e.step, e.branch, e.tool) for e in completions(events)}
    assert len(completions(events)) == len(done) == 6
    assert done == {
        (0, None, "fans_out"),
        (1, 0, "fast"),
        (1, 1, "fast"),
        (1, 2, "slow"),
        (1, None, None),
        (2, None, "fast"),
    }
    assert read_branch_executions(executions) == {(tid, 1, b): 1 for b in range(3)}
    assert read_executions(executions)[(tid, 2)] == 1


async def test_a_tool_that_appends_a_nested_group_fails_with_invalid_plan(
    client: Client, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    await make_worker(APPS)
    handle = await client.submit([Step(tool="fans_out_nested", input={}), "fast"])

    with pytest.raises(TaskFailedError, match="groups do not nest") as failure:
        await handle.wait(timeout=15)

    assert failure.value.error is not None and failure.value.error.type == "InvalidPlan"
    assert len((await handle.get()).steps) == 2
    assert not read_branch_executions(executions)


# -- validation -------------------------------------------------------------------------

ONE = [{"tool": "fast", "input": 1}]
INVALID_STEPS: list[tuple[str, Any, str]] = [
    ("tool-on-group", {"parallel": ONE, "tool": "fast"}, "takes only 'parallel'"),
    ("input-on-group", {"parallel": ONE, "input": 1}, "takes only 'parallel'"),
    ("timeout-on-group", {"parallel": ONE, "timeout_ms": 100}, "takes only 'parallel'"),
    ("zero-timeout-on-group", {"parallel": ONE, "timeout_ms": 0}, "takes only 'parallel'"),
    ("retry-on-group", {"parallel": ONE, "retry": {"max_attempts": 2}}, "takes only 'parallel'"),
    ("nested-dict", {"parallel": [{"parallel": ONE}]}, "groups do not nest"),
    ("nested-python", Parallel(Parallel("fast"), "fast"), "groups do not nest"),
    ("empty-dict", {"parallel": []}, "parallel"),
    ("empty-python", Parallel(), "1 to 1000 branches"),
    ("collect-errors-on-tool", {"tool": "fast", "collect_errors": True}, "belongs on a parallel"),
    ("collect-errors-on-branch", Parallel(Step(tool="fast", collect_errors=True)), "belongs on"),
    ("neither-tool-nor-parallel", {"input": 1}, "give a 'tool'"),
    ("branch-without-tool", {"parallel": [{"input": 1}]}, "branch 0: give a 'tool'"),
    ("bad-branch-tool-name", {"parallel": [{"tool": "no such tool"}]}, "branch 0"),
    ("unknown-branch-tool", Parallel("fast", "nobody_serves_this"), "unknown tool"),
    ("bad-branch-timeout", {"parallel": [{"tool": "fast", "timeout_ms": 0}]}, "positive"),
]


async def test_an_invalid_group_is_refused_at_submit(
    client: Client, store: Store, raw: Raw, registered: None
) -> None:
    """Every case in one test: a worker per case would cost a second of teardown each."""
    for case, step, message in INVALID_STEPS:
        try:
            await client.submit([step], strict=True)
        except InvalidTaskError as exc:
            assert re.search(message, str(exc)), f"{case}: {exc}"
        else:
            pytest.fail(f"{case}: accepted")

    info = await raw.js.stream_info(store.names.submit_stream)
    assert info.state.messages == 0, "an invalid task must not be published"


# -- retry ------------------------------------------------------------------------------


async def test_retry_reruns_only_the_branches_that_were_not_checkpointed(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker, executions: Path
) -> None:
    """b0 completes, b1 fails for good, b2 is running and gets stopped; the retry runs
    b1 and b2 again (b1 with the previous step's output again), not b0."""
    await make_worker(APPS)
    tid = f"retry-{uuid.uuid4().hex[:8]}"
    handle = await client.submit(
        [
            Step(tool="fast", input="seed"),
            Parallel("fast", "held", Step(tool="held", input="third")),
            "fast",
        ],
        task_id=tid,
    )
    await handle.wait_for(lambda r: r.done_branches == [0], timeout=10)
    await eventually(lambda: branch_ran(executions, tid, 1, 2))
    release(tid, 1)
    with pytest.raises(TaskFailedError, match="held closed"):
        await handle.wait(timeout=10)
    failed = await handle.get()
    assert failed.failed_step == 1 and failed.done_branches == [0]
    await wait_until(lambda: (tid, 1, 2, 1) in STOPPED, timeout=3, message="b2 to be stopped")
    assert await store.checkpoints.get(tid, 1, 2) is None
    OPEN.add(tid)
    release(tid, 2)

    await client.retry(tid)

    result = await handle.wait(timeout=15)
    previous = {"step": 0, "payload": "seed"}
    assert result == {
        "step": 2,
        "payload": [
            {"step": 1, "payload": previous},
            {"input": previous, "attempt": 1},
            {"input": "third", "attempt": 1},
        ],
    }
    branches = read_branch_executions(executions)
    assert [branches[(tid, 1, b)] for b in range(3)] == [1, 2, 2]
    steps = read_executions(executions)
    assert (steps[(tid, 0)], steps[(tid, 2)]) == (1, 1)
    done = await handle.get()
    assert done.generation == 2 and done.status is TaskStatus.COMPLETED


async def test_retry_completes_a_branch_checkpointed_after_the_failure_without_running_it(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    """A branch that finished after its task failed is checkpointed but not counted in
    `done_branches`; the retry sends it again, and the checkpoint answers for it."""
    await make_worker(APPS)
    tid = f"late-{uuid.uuid4().hex[:8]}"
    handle = await client.submit(
        [Parallel(Step(tool="stubborn", input="late"), Step(tool="held", input=2))], task_id=tid
    )
    await eventually(lambda: branch_ran(executions, tid, 0, 0))
    release(tid, 1)
    with pytest.raises(TaskFailedError, match="held closed"):
        await handle.wait(timeout=10)

    async def late_checkpoint() -> None:
        assert await store.checkpoints.get(tid, 0, 0) is not None

    await eventually(late_checkpoint, timeout=5)
    assert (await handle.get()).done_branches == []
    OPEN.add(tid)

    await client.retry(tid)

    result = await handle.wait(timeout=15)
    assert result == [{"stubborn": "late"}, {"input": 2, "attempt": 1}]
    branches = read_branch_executions(executions)
    assert (branches[(tid, 0, 0)], branches[(tid, 0, 1)]) == (1, 2)
    # `events()` ends at the first run's `failed`: read the whole log.
    events = await raw_events(raw, store.names, tid, until="completed")
    again = [e for e in events if e["event"] == "step_completed" and e["branch"] == 0]
    assert [e.get("skipped", False) for e in again] == [True], "branch 0 ran again?"


async def test_retry_of_a_group_that_failed_at_its_fan_in_does_not_hang(
    config: NatsConfig, client: Client, dispatcher: object, executions: Path
) -> None:
    """Each branch's output fits, their list does not (blobs off; with blobs each output
    is a reference): the last branch fails the task (OutputTooLarge) after every branch
    was counted. A retry must end the task again."""
    size = client.max_payload * 6 // 10
    async with Worker(APPS, config, layout=inline_only(config)):
        handle = await client.submit(
            [Parallel(Step(tool="sized", input=size), Step(tool="sized", input=size)), "fast"]
        )
        with pytest.raises(TaskFailedError, match="OutputTooLarge"):
            await handle.wait(timeout=10)
        failed = await handle.get()
        assert failed.failed_step == 0 and failed.done_branches == [0, 1]

        await client.retry(handle.task_id)

        record_ = await handle.wait_until_done(timeout=3)  # it used to stay running for ever
    assert record_.status is TaskStatus.FAILED
    assert record_.error is not None and record_.error.type == "OutputTooLarge"


# -- raw JSON ---------------------------------------------------------------------------


async def test_a_raw_json_submit_runs_a_group(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(APPS)
    names = store.names
    tid = f"raw-{uuid.uuid4().hex[:8]}"
    body = {
        "task_id": tid,
        "steps": [
            {
                "parallel": [
                    {"tool": "slow", "input": {"sleep": 0.2}},
                    {"tool": "fast", "input": {"n": 1}},
                ],
                "collect_errors": False,
            },
            {"tool": "fast"},
        ],
    }
    ack = await raw.js.publish(
        names.submit_subject(tid), json.dumps(body).encode(), headers={"Nats-Msg-Id": tid}
    )
    assert not ack.duplicate

    result = await client.handle(tid).wait(timeout=15)

    group_output = [{"step": 0, "slept": 0.2}, {"step": 0, "payload": {"n": 1}}]
    assert result == {"step": 1, "payload": group_output}
    branch_0 = await checkpoint_json(raw, names, f"{tid}.0.b0")
    assert branch_0 is not None and branch_0["output"] == {"step": 0, "slept": 0.2}
    events = await raw_events(raw, names, tid, until="completed")
    branch_done = {
        e["branch"]: e["tool"] for e in events if e["event"] == "step_completed" and e["step"] == 0
    }
    assert branch_done == {0: "slow", 1: "fast", None: None}


async def test_a_raw_json_submit_with_a_nested_group_is_rejected(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    executions: Path,
) -> None:
    await make_worker(APPS)
    tid = f"raw-{uuid.uuid4().hex[:8]}"
    body = {"task_id": tid, "steps": [{"parallel": [{"parallel": [{"tool": "fast"}]}]}]}
    await raw.js.publish(
        store.names.submit_subject(tid),
        json.dumps(body).encode(),
        headers={"Nats-Msg-Id": tid},
    )

    with pytest.raises(TaskFailedError, match="groups do not nest") as failure:
        await client.handle(tid).wait(timeout=10)

    assert failure.value.error is not None and failure.value.error.type == "InvalidTask"
    assert not read_branch_executions(executions)
