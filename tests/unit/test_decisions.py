"""The step decision and the retry outcome, branch by branch, without a server."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from tether import RetryableError, RetryPolicy, TerminalError
from tether.schemas.plans import StepSpec
from tether.schemas.records import Checkpoint, ErrorInfo, TaskRecord, TaskStatus
from tether.schemas.work import WorkMessage
from tether.worker.decisions import (
    Drop,
    Execute,
    Failure,
    FromCheckpoint,
    GiveUp,
    Reject,
    ReplayFanIn,
    RepublishHandoff,
    Retry,
    SayBranchDone,
    Wait,
    before_attempt,
    classify,
    decide,
    error_info,
    outcome,
)
from tether.worker.runs import Count

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
STEPS = [StepSpec(tool="search"), StepSpec(tool="summarize"), StepSpec(tool="write_report")]
CHECKPOINT = Checkpoint(output="stored", attempt=1, time=T0)
POLICY = RetryPolicy(max_attempts=3, initial_backoff=1, max_backoff=60, jitter=0.0)


def record(**changes: Any) -> TaskRecord:
    base = TaskRecord(
        task_id="t", status=TaskStatus.RUNNING, steps=STEPS, created_at=T0, updated_at=T0
    )
    return msgspec.structs.replace(base, **changes)


def work(step: int = 1, generation: int = 1) -> WorkMessage:
    return WorkMessage(task_id="t", step=step, tool=STEPS[step].tool, generation=generation)


GROUP = [STEPS[0], StepSpec(parallel=[StepSpec(tool="search")] * 2), STEPS[2]]
GROUP_AT_1 = record(steps=GROUP, current_step=1, done_branches=[0])
GROUP_PAST = record(steps=GROUP, current_step=2)


def branch(b: int) -> WorkMessage:
    return WorkMessage(task_id="t", step=1, tool="search", generation=1, branch=b)


LAST_DONE = record(status=TaskStatus.COMPLETED, current_step=3, result="final")

DECISIONS = [
    # (name, record, checkpoint, work, expected)
    ("no record", None, None, work(), Reject("no task 't' exists")),
    ("another generation", record(current_step=1, generation=2), None, work(), Drop()),
    ("failed task", record(status=TaskStatus.FAILED, current_step=1), None, work(), Drop()),
    ("cancelled task", record(status=TaskStatus.CANCELLED, current_step=1), None, work(), Drop()),
    ("record two steps on", record(current_step=3), CHECKPOINT, work(), Drop()),
    ("record behind the step", record(current_step=0), None, work(), Drop()),
    ("completed, earlier step", LAST_DONE, CHECKPOINT, work(1), Drop()),
    ("recorded, hand-off maybe lost", record(current_step=2), CHECKPOINT, work(),
     RepublishHandoff(CHECKPOINT)),
    ("completed task, last step", LAST_DONE, None, work(2),
     RepublishHandoff(Checkpoint(output="final", time=T0))),
    ("recorded but output lost", record(current_step=2), None, work(), Execute()),
    ("checkpointed, record behind", record(current_step=1), CHECKPOINT, work(),
     FromCheckpoint(CHECKPOINT)),
    ("answered input", record(status=TaskStatus.WAITING, current_step=1), CHECKPOINT, work(),
     FromCheckpoint(CHECKPOINT)),
    ("waiting for input", record(status=TaskStatus.WAITING, current_step=1), None, work(),
     Wait()),
    ("pending first step", record(status=TaskStatus.PENDING), None, work(0), Execute()),
    ("running step", record(current_step=1), None, work(), Execute()),
    # a branch of the group at step 1 (issue 25: its step_completed may be missing)
    ("branch counted, group running", GROUP_AT_1, CHECKPOINT, branch(0),
     FromCheckpoint(CHECKPOINT)),
    ("branch of a group moved past", GROUP_PAST, None, branch(0), ReplayFanIn()),
    ("branch, task two steps on", msgspec.structs.replace(GROUP_PAST, current_step=3),
     CHECKPOINT, branch(0), SayBranchDone(CHECKPOINT)),
    ("branch, task completed", msgspec.structs.replace(GROUP_PAST, current_step=3,
     status=TaskStatus.COMPLETED), CHECKPOINT, branch(0), SayBranchDone(CHECKPOINT)),
    ("branch, task failed", msgspec.structs.replace(GROUP_PAST, current_step=3,
     status=TaskStatus.FAILED), CHECKPOINT, branch(0), Drop()),
    ("branch, another generation", msgspec.structs.replace(GROUP_PAST, current_step=3,
     generation=2), CHECKPOINT, branch(0), Drop()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("found", "checkpoint", "message", "expected"),
    [case[1:] for case in DECISIONS],
    ids=[case[0] for case in DECISIONS],
)
def test_decide(
    found: TaskRecord | None, checkpoint: Checkpoint | None, message: WorkMessage, expected: object
) -> None:
    assert decide(found, checkpoint, message) == expected


CLASSIFIED = [
    ("step timeout", TimeoutError(), True, False, 2.5,
     Failure(ErrorInfo(type="StepTimeout", message="step timed out after 2.5s"), True)),
    ("deadline cut it off", TimeoutError(), True, True, 2.5,
     Failure(ErrorInfo(type="DeadlineExceeded", message="task deadline exceeded"), False)),
    ("the tool's own TimeoutError", TimeoutError("upstream"), False, False, None,
     Failure(ErrorInfo(type="TimeoutError", message="upstream"), True)),
    ("terminal", TerminalError("no"), False, False, None,
     Failure(ErrorInfo(type="TerminalError", message="no"), False, stops_task=True)),
    ("retryable with a delay", RetryableError("busy", retry_after=7), False, False, None,
     Failure(ErrorInfo(type="RetryableError", message="busy"), True, timedelta(seconds=7),
             explained=True)),
    ("any other error", KeyError("k"), False, False, None,
     Failure(ErrorInfo(type="KeyError", message="'k'"), True)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("exc", "timed_out", "deadline_passed", "timeout", "expected"),
    [case[1:] for case in CLASSIFIED],
    ids=[case[0] for case in CLASSIFIED],
)
def test_classify(
    exc: BaseException,
    timed_out: bool,
    deadline_passed: bool,
    timeout: float | None,
    expected: Failure,
) -> None:
    assert classify(exc, timed_out=timed_out, deadline_passed=deadline_passed, timeout=timeout) == (
        expected
    )


BOOM = ErrorInfo(type="RuntimeError", message="boom")
OUTCOMES = [
    ("not retryable", Failure(BOOM, False), 1, GiveUp(BOOM)),
    ("first attempt", Failure(BOOM, True), 1, Retry(timedelta(seconds=1))),
    ("second attempt backs off", Failure(BOOM, True), 2, Retry(timedelta(seconds=2))),
    ("the error's own delay", Failure(BOOM, True, timedelta(seconds=9)), 1,
     Retry(timedelta(seconds=9))),
    ("a Retry-After past max_backoff is capped", Failure(BOOM, True, timedelta(seconds=600)),
     1, Retry(POLICY.max_backoff)),
    ("attempts used up", Failure(BOOM, True), 3,
     GiveUp(ErrorInfo(type="RuntimeError", message="gave up after 3 attempts: boom"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("failure", "attempt", "expected"),
    [case[1:] for case in OUTCOMES],
    ids=[case[0] for case in OUTCOMES],
)
def test_outcome(failure: Failure, attempt: int, expected: object) -> None:
    assert outcome(failure, POLICY, attempt, random.Random(0)) == expected


def test_before_attempt() -> None:
    assert before_attempt(record(), Count(1), POLICY, T0) is None
    assert before_attempt(record(), Count(3), POLICY, T0) is None
    lost = before_attempt(record(), Count(4), POLICY, T0)
    assert isinstance(lost, GiveUp) and lost.error.type == "RetriesExhausted"
    spared = Count(6, deaths=1, spared=3)  # three runs died beside others: not charged
    assert before_attempt(record(), spared, POLICY, T0) is None
    poison = before_attempt(record(), Count(5, deaths=2, spared=2), POLICY, T0)
    assert isinstance(poison, GiveUp) and poison.error.type == "SuspectedPoison"
    late = before_attempt(record(deadline_at=T0), Count(1), POLICY, T0 + timedelta(seconds=1))
    assert late == GiveUp(ErrorInfo(type="DeadlineExceeded", message="task deadline exceeded"))


def test_a_huge_error_message_is_cut_so_the_failure_fits() -> None:
    info = error_info(RuntimeError("x" * 100_000))
    assert len(info.message) < 4200 and info.message.endswith("(100,000 characters)")
