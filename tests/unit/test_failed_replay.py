"""A redelivery that finds its own step's `failed` record says it again (issue 37):
which messages replay the failure, and which are stale."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from tether.schemas import codec
from tether.schemas.plans import StepSpec
from tether.schemas.records import Checkpoint, ErrorInfo, TaskRecord, TaskStatus
from tether.schemas.work import WorkMessage
from tether.worker.decisions import Drop, ReplayFailure, decide

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
DENIED = ErrorInfo(type="TerminalError", message="permission denied")
STEPS = [
    StepSpec(tool="search"),
    StepSpec(parallel=[StepSpec(tool="search"), StepSpec(tool="summarize")]),
    StepSpec(tool="write_report"),
]


def failed(**changes: Any) -> TaskRecord:
    """Step 0's attempt 2 gave up and failed the task."""
    base = TaskRecord(
        task_id="t",
        status=TaskStatus.FAILED,
        steps=STEPS,
        created_at=T0,
        updated_at=T0,
        error=DENIED,
        failed_step=0,
        failed_attempt=2,
    )
    return msgspec.structs.replace(base, **changes)


def at_branch(**changes: Any) -> TaskRecord:
    """Branch 1 of the group at step 1 gave up at attempt 1."""
    return failed(
        **{"current_step": 1, "failed_step": 1, "failed_branch": 1, "failed_attempt": 1, **changes}
    )


def work(step: int = 0, branch: int | None = None, generation: int = 1) -> WorkMessage:
    tool = "search" if branch is None else ["search", "summarize"][branch]
    return WorkMessage(task_id="t", step=step, tool=tool, branch=branch, generation=generation)


CHECKPOINT = Checkpoint(output="stored", attempt=1, time=T0)

CASES = [
    # (name, record, checkpoint, message, attempt, expected)
    ("the redelivery of the attempt that failed", failed(), None, work(), 3, ReplayFailure()),
    ("the same attempt again (its delivery state lost)", failed(), None, work(), 2,
     ReplayFailure()),
    ("an attempt before the one that failed", failed(), None, work(), 1, Drop()),
    ("failed at no attempt (a deadline, a child, a rejected message)",
     failed(failed_attempt=None), None, work(), 3, Drop()),
    ("another step failed the task", failed(failed_step=2, current_step=2), None, work(), 3,
     Drop()),
    ("a message of an earlier run", failed(generation=2), None, work(), 3, Drop()),
    ("a message of a later run", failed(), None, work(generation=2), 3, Drop()),
    ("cancelled, not failed", failed(status=TaskStatus.CANCELLED), None, work(), 3, Drop()),
    ("the branch that failed the task", at_branch(), None, work(1, 1), 2, ReplayFailure()),
    ("the failed branch's own checkpoint does not matter", at_branch(), CHECKPOINT,
     work(1, 1), 2, ReplayFailure()),
    ("a sibling branch", at_branch(), None, work(1, 0), 2, Drop()),
    ("a counted sibling: a failed run counts nothing more", at_branch(done_branches=[0]),
     CHECKPOINT, work(1, 0), 2, Drop()),
    ("a branch, the group failed as a whole (its fan-in)",
     at_branch(failed_branch=None, failed_attempt=None), None, work(1, 1), 2, Drop()),
    ("the group failed at a branch: a message without one", at_branch(), None, work(1), 2,
     Drop()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("found", "checkpoint", "message", "attempt", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decide_on_a_failed_record(
    found: TaskRecord,
    checkpoint: Checkpoint | None,
    message: WorkMessage,
    attempt: int,
    expected: object,
) -> None:
    assert decide(found, checkpoint, message, attempt) == expected


def test_a_record_written_before_the_fields_reads_them_as_none() -> None:
    """Schema evolution: the new fields have defaults, so old records still decode."""
    old = msgspec.json.decode(codec.encode(failed()))
    del old["failed_branch"], old["failed_attempt"]

    record = codec.record_decoder.decode(msgspec.json.encode(old))

    assert (record.failed_step, record.failed_branch, record.failed_attempt) == (0, None, None)
    assert decide(record, None, work(), 3) == Drop()
