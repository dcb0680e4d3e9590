"""What the dashboard shows, from events and records alone (`tether.ui.views`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tether.schemas.events import (
    Completed,
    Failed,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
    Waiting,
)
from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, TaskStatus
from tether.ui import views

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RUNNING = TaskStatus.RUNNING


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def started(step: int, attempt: int, t: float, branch: int | None = None) -> StepStarted:
    return StepStarted(
        task_id="t", status=RUNNING, step=step, branch=branch, tool="search", attempt=attempt,
        time=at(t),
    )  # fmt: skip


def completed(step: int, attempt: int, t: float, branch: int | None = None) -> StepCompleted:
    return StepCompleted(
        task_id="t", status=RUNNING, step=step, branch=branch, tool="search", attempt=attempt,
        time=at(t), output={"ok": step},
    )  # fmt: skip


def test_a_step_started_again_with_no_end_is_marked_as_crashed_and_a_retry_as_retrying() -> None:
    error = ErrorInfo(type="RetryableError", message="503")
    events = [
        Submitted(task_id="t", status=TaskStatus.PENDING, time=at(0)),
        started(0, 1, 1),
        started(0, 2, 4),  # the first holder died: redelivered
        StepRetrying(
            task_id="t",
            status=RUNNING,
            step=0,
            attempt=2,
            time=at(5),
            error=error,
            retry_in_ms=200,
        ),
        started(0, 3, 6),
        completed(0, 3, 7),
        Completed(task_id="t", status=TaskStatus.COMPLETED, time=at(8)),
    ]

    line = views.timeline(events, now=at(100))

    (lane,) = line.lanes
    assert [(a.number, a.outcome) for a in lane.attempts] == [
        (1, "crashed"),
        (2, "retrying"),
        (3, "completed"),
    ]
    assert lane.attempts[1].error == error and lane.output == {"ok": 0}
    assert line.seconds == 8  # the task's own span, not up to now
    bars = line.bars(lane)
    assert (bars[0].left, bars[0].width) == (12.5, 37.5)


def test_a_parallel_steps_lane_comes_before_its_branches_named_by_the_plan() -> None:
    plan = [
        StepSpec(parallel=[StepSpec(tool="search"), StepSpec(tool="fetch")]),
        StepSpec(tool="write"),
    ]
    events = [
        started(0, 1, 1, branch=1),
        started(0, 1, 1, branch=0),
        completed(0, 1, 2, branch=0),
        completed(0, 1, 3, branch=1),
        StepCompleted(task_id="t", status=RUNNING, step=0, time=at(3), output=[1, 2]),
        started(1, 1, 3),
    ]

    line = views.timeline(events, now=at(4), plan=plan)

    assert [(lane.key, lane.tool) for lane in line.lanes] == [
        ("0", "parallel(search, fetch)"),
        ("0.0", "search"),
        ("0.1", "search"),
        ("1", "search"),
    ]
    assert line.lanes[-1].attempts[-1].outcome == "running"
    assert line.end == at(4)  # still running: the span runs to now


def test_a_waiting_step_and_a_task_that_ended_while_a_step_ran() -> None:
    waiting = [
        started(0, 1, 1),
        Waiting(task_id="t", status=TaskStatus.WAITING, step=0, time=at(2)),
    ]
    assert views.timeline(waiting, now=at(3)).lanes[0].attempts[0].outcome == "waiting"

    cancelled = [started(0, 1, 1), completed(0, 1, 2), started(1, 1, 2)]
    cancelled.append(StepCompleted(task_id="t", status=TaskStatus.CANCELLED, time=at(5)))
    last = views.timeline(cancelled, now=at(9)).lanes[-1].attempts[-1]
    assert (last.outcome, last.ended) == ("stopped", at(5))


SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string"},
        "budget": {"type": "integer"},
        "tags": {"type": "array"},
    },
    "required": ["approved", "reason"],
}


def test_a_forms_fields_become_an_answer_of_the_schemas_types() -> None:
    form = {
        "field.approved": "on",
        "field.reason": "fine",
        "field.budget": "3",
        "field.tags": '["a"]',
    }
    assert views.answer_from_form(SCHEMA, form) == {
        "approved": True,
        "reason": "fine",
        "budget": 3,
        "tags": ["a"],
    }
    assert views.answer_from_form(SCHEMA, {"field.reason": "no"}) == {
        "approved": False,  # an unticked box is a no, as HTML sends it
        "reason": "no",
    }
    assert views.answer_from_form(SCHEMA, {"json": '{"any": 1}'}) == {"any": 1}


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"field.approved": "on"}, "missing: reason"),
        ({"field.reason": "x", "field.budget": "many"}, "budget: 'many' is not a valid integer"),
        ({"json": "{oops"}, "the answer is not JSON"),
    ],
)
def test_a_form_that_makes_no_answer_says_why(form: dict[str, str], message: str) -> None:
    with pytest.raises(views.FormError, match=message):
        views.answer_from_form(SCHEMA, form)


def test_only_an_object_schema_gets_fields_and_counts_name_every_status() -> None:
    assert views.form_fields({"type": "string"}) is None
    fields = views.form_fields(SCHEMA)
    assert fields is not None and [f["name"] for f in fields if f["required"]] == [
        "approved",
        "reason",
    ]
    counts = views.counts(["running", "running", "failed", "junk"])
    assert counts["running"] == 2 and counts["failed"] == 1 and counts["waiting"] == 0
    assert views.duration(0.25) == "250ms" and views.duration(90) == "1.5m"


def test_a_task_retried_by_hand_shows_the_failed_attempt_then_the_new_one() -> None:
    error = ErrorInfo(type="TerminalError", message="the gate is closed")
    events = [
        started(0, 1, 1),
        Failed(task_id="t", status=TaskStatus.FAILED, step=0, attempt=1, time=at(2), error=error),
        StepRetrying(task_id="t", status=RUNNING, step=0, time=at(5)),  # `tether retry`
        started(0, 1, 5),
        completed(0, 1, 6),
    ]

    (lane,) = views.timeline(events, now=at(7)).lanes

    assert [a.outcome for a in lane.attempts] == ["failed", "completed"]
