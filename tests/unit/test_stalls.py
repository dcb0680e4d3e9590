"""The pure account of a stalled task: here, a running step whose worker fell silent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether.schemas import TaskStatus
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord
from tether.schemas.workers import Heartbeat, WorkerBeat
from tether.tasks.stalls import DEAD_AFTER, silent_holder
from tether.worker.liveness import Liveness

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _record(status: TaskStatus = TaskStatus.RUNNING) -> TaskRecord:
    return TaskRecord(
        task_id="t",
        status=status,
        steps=[StepSpec(tool="helper")],
        current_step=0,
        created_at=NOW - timedelta(minutes=1),
        updated_at=NOW - timedelta(minutes=1),
    )


def _heartbeat(ago: float) -> Heartbeat:
    return Heartbeat(
        task_id="t", step=0, tool="helper", attempt=1, worker_id="vm-550", time=NOW - _s(ago)
    )


def _beat(worker: str, ago: float, tools: tuple[str, ...] = ("helper",)) -> WorkerBeat:
    return WorkerBeat(
        worker_id=worker,
        tools=list(tools),
        concurrency=1,
        started_at=NOW - timedelta(hours=1),
        time=NOW - _s(ago),
    )


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def test_a_worker_that_beats_is_not_a_stall() -> None:
    assert silent_holder(_record(), _heartbeat(12.7), [_beat("vm-550", 0.3)], NOW) is None


def test_the_only_worker_silent_past_dead_after_says_none_serves_the_tool() -> None:
    stall = silent_holder(_record(), _heartbeat(12.7), [_beat("vm-550", 12.7)], NOW)
    assert stall is not None and stall.kind == "holder"
    assert stall.since == NOW - _s(12.7)
    assert stall.message.startswith(
        "worker vm-550 has been silent 12.7 s; step 0 runs again when a worker serving "
        "'helper' starts — none is running; start one with 'tether worker MODULE:APP'"
    )


def test_a_live_worker_serving_the_tool_is_said_to_take_it_over() -> None:
    beats = [_beat("vm-550", 5.0), _beat("vm-2", 0.2), _beat("vm-3", 0.2, ("other",))]
    stall = silent_holder(_record(), _heartbeat(5.0), beats, NOW)
    assert stall is not None
    assert stall.message.endswith(
        "step 0 runs again on another worker serving 'helper' (1 running)"
    )


def test_a_silent_worker_does_not_count_as_serving() -> None:
    beats = [_beat("vm-550", 5.0), _beat("vm-2", 4.0)]
    stall = silent_holder(_record(), _heartbeat(5.0), beats, NOW)
    assert stall is not None and "none is running" in stall.message


def test_a_worker_with_no_listed_beat_is_judged_by_its_step_heartbeat() -> None:
    assert silent_holder(_record(), _heartbeat(5.0), [], NOW) is None  # may not beat at all
    stall = silent_holder(_record(), _heartbeat(45.0), [], NOW)
    assert stall is not None and "silent 45.0 s" in stall.message


def test_no_stall_when_the_task_is_not_running_that_step() -> None:
    beats = [_beat("vm-550", 20.0)]
    assert silent_holder(_record(TaskStatus.PENDING), _heartbeat(20.0), beats, NOW) is None
    assert silent_holder(_record(), None, beats, NOW) is None


def test_the_silence_said_is_the_fleets_default_dead_after() -> None:
    assert DEAD_AFTER == timedelta(seconds=Liveness().dead_after)
