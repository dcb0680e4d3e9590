"""RecentRecords: which remembered records a step may start from without a read."""

from __future__ import annotations

import msgspec
import pytest

from tether.clock import utcnow
from tether.nats.recent import RecentRecords, Versioned
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus


def versioned(step: int = 1, status: TaskStatus = TaskStatus.RUNNING) -> Versioned:
    now = utcnow()
    record = TaskRecord(
        task_id="t",
        status=status,
        steps=[StepSpec(tool="a"), StepSpec(tool="b")],
        current_step=step,
        created_at=now,
        updated_at=now,
    )
    return Versioned(record, 7)


def test_the_next_step_takes_the_record_once() -> None:
    recent = RecentRecords(lambda: 0)
    found = versioned()
    recent.remember(found, 100)

    assert recent.take("t", 1, 1) is found
    assert recent.take("t", 1, 1) is None


@pytest.mark.parametrize(
    ("step", "generation", "status"),
    [
        (0, 1, TaskStatus.RUNNING),  # another step
        (1, 2, TaskStatus.RUNNING),  # another generation (a retry)
        (1, 1, TaskStatus.WAITING),  # a resumed step needs its answer: read it
        (1, 1, TaskStatus.CANCELLED),
    ],
)
def test_a_record_for_another_situation_is_not_used(
    step: int, generation: int, status: TaskStatus
) -> None:
    recent = RecentRecords(lambda: 0)
    found = versioned(status=status)
    recent.remember(found, 100)

    assert recent.take("t", step, generation) is None


def test_a_cancel_notice_or_a_reconnect_drops_records() -> None:
    reconnects = [0]
    recent = RecentRecords(lambda: reconnects[0])
    recent.remember(versioned(), 100)
    recent.forget("t")
    assert recent.take("t", 1, 1) is None

    recent.remember(versioned(), 100)
    reconnects[0] += 1  # notices sent while disconnected are lost
    assert recent.take("t", 1, 1) is None


def test_only_small_running_records_are_kept() -> None:
    recent = RecentRecords(lambda: 0)
    recent.remember(versioned(), 100)
    recent.remember(versioned(status=TaskStatus.COMPLETED), 100)  # replaces, then drops
    assert recent.take("t", 1, 1) is None

    recent.remember(versioned(), 1_000_000)
    assert recent.take("t", 1, 1) is None


@pytest.mark.parametrize(
    "change",
    [{"awaiting": "t-s1"}, {"done_branches": [0]}],
    ids=["a child runs the step", "a branch is done"],
)
def test_a_record_whose_step_may_have_a_checkpoint_is_not_kept(change: dict[str, object]) -> None:
    """The next message of such a step may find a checkpoint (the child's result, a
    branch's output): it must read it, not start from memory."""
    recent = RecentRecords(lambda: 0)
    found = versioned()
    recent.remember(Versioned(msgspec.structs.replace(found.record, **change), 8), 100)

    assert recent.take("t", 1, 1) is None
