"""The retention sweep's decisions: which tasks are past retention, which blobs are garbage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus
from tether.tasks.retention import BLOB_GRACE, expired, garbage, referenced_blobs

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
A, B, C = "a" * 64, "b" * 64, "c" * 64


def _record(status: TaskStatus, age: timedelta) -> TaskRecord:
    at = NOW - age
    steps = [StepSpec(tool="fast")]
    return TaskRecord(task_id="t", status=status, steps=steps, created_at=at, updated_at=at)


def test_only_a_finished_task_past_retention_expires() -> None:
    week = timedelta(days=7)
    assert expired(_record(TaskStatus.COMPLETED, week * 2), NOW, week)
    assert expired(_record(TaskStatus.CANCELLED, week * 2), NOW, week)
    assert not expired(_record(TaskStatus.COMPLETED, week / 2), NOW, week)
    assert not expired(_record(TaskStatus.WAITING, week * 2), NOW, week)
    assert not expired(_record(TaskStatus.RUNNING, week * 2), NOW, week)


def test_references_are_found_at_any_depth_and_in_lists() -> None:
    value = {
        "output": [{"$blob": f"sha256:{A}", "size": 1}, {"deep": {"$blob": f"sha256:{B}"}}],
        "text": "sha256:" + C,  # a digest that is not a reference
    }
    assert referenced_blobs(msgspec.json.encode(value)) == {A, B}


def test_a_blob_is_garbage_only_unreferenced_and_past_the_grace() -> None:
    old, young = NOW - BLOB_GRACE * 2, NOW - BLOB_GRACE / 2
    stored = [(A, old), (B, old), (C, young)]
    assert garbage(stored, {A}, NOW) == [B]


def test_a_session_goes_only_when_idle_with_nothing_waiting_and_its_last_run_expired() -> None:
    from tether.schemas.sessions import SessionState
    from tether.tasks.retention import session_expired, session_runs

    idle = SessionState(agent="a", runs=2, last="s-r2")
    assert session_runs("s", idle) == ["s-r1", "s-r2"]
    assert session_expired("s", idle, {"s-r1", "s-r2"})
    assert not session_expired("s", idle, {"s-r1"})  # its last run is recent
    for busy in (
        SessionState(agent="a", runs=2, current="s-r2"),
        SessionState(agent="a", runs=2, queued=["m"]),
        SessionState(agent="a", runs=2, carried=["m"]),
    ):
        assert not session_expired("s", busy, {"s-r1", "s-r2"})
