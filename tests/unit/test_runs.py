"""Which attempt a delivery is (`tether.worker.runs`): only deliveries that started count,
and only a death while a step ran alone counts against it."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from tether.schemas.events import StepStarted
from tether.schemas.records import TaskStatus
from tether.schemas.runs import StepRun
from tether.schemas.work import WorkMessage
from tether.worker.runs import (
    HOLDER_FRESH_FOR,
    Count,
    count,
    held_by,
    poisoned,
    runs_elsewhere,
    started_by_event,
)

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def run(
    attempt: int,
    *,
    running: bool,
    deaths: int = 0,
    spared: int = 0,
    alone: bool = False,
    waiting: bool = False,
    seq: int = 7,
    delivered: int = 2,
) -> StepRun:
    return StepRun(
        generation=1,
        attempt=attempt,
        sequence=seq,
        delivered=delivered,
        running=running,
        deaths=deaths,
        spared=spared,
        alone=alone,
        waiting=waiting,
        time=NOW,
    )


def test_a_later_delivery_of_the_same_message_that_started_owns_the_step() -> None:
    later = run(1, running=True, seq=7, delivered=2)
    assert runs_elsewhere(later, sequence=7, delivered=1)  # handled again after NATS was away
    assert not runs_elsewhere(later, sequence=7, delivered=3)
    assert not runs_elsewhere(later, sequence=8, delivered=1)  # another message's run
    assert not runs_elsewhere(run(1, running=False, delivered=2), sequence=7, delivered=1)


def test_deliveries_that_never_started_cost_no_attempt() -> None:
    assert count(prior=0, delivered=6, sequence=7, generation=1, last=None) == Count(1, 0)


def test_a_death_beside_other_steps_makes_a_suspect_and_costs_no_attempt() -> None:
    died = run(2, running=True, spared=1, delivered=3)
    assert count(0, 4, 7, 1, died) == Count(3, deaths=0, spared=2)
    assert count(0, 9, 7, 1, died) == Count(3, deaths=0, spared=2)  # 4..8 never started
    assert Count(3, deaths=0, spared=2).charged == 1


def test_a_death_while_it_ran_alone_is_its_own() -> None:
    died = run(3, running=True, spared=2, alone=True, delivered=3)
    assert count(0, 4, 7, 1, died) == Count(4, deaths=1, spared=2)
    assert Count(4, deaths=1, spared=2).charged == 2


def test_one_ordinary_crash_serialises_nothing_a_second_death_of_any_kind_does() -> None:
    assert not Count(2, spared=1).alone
    assert Count(3, spared=2).alone
    assert Count(3, deaths=1, spared=1).alone


def test_a_suspect_that_waited_to_run_alone_and_never_started_loses_nothing() -> None:
    waited = run(4, running=False, waiting=True, deaths=1, spared=2, delivered=3)
    assert count(0, 5, 7, 1, waited) == Count(4, deaths=1, spared=2)


def test_a_failed_attempt_sent_back_is_the_next_attempt_not_a_death() -> None:
    assert count(0, 3, 7, 1, run(2, running=False, deaths=1)) == Count(3, 1)


def test_a_step_published_again_counts_from_its_prior_attempts_and_its_last_run() -> None:
    held_and_died = run(2, running=True, seq=5)
    assert count(prior=2, delivered=1, sequence=9, generation=1, last=held_and_died) == Count(
        3, spared=1
    )
    assert count(prior=4, delivered=1, sequence=9, generation=1, last=None) == Count(5, 0)


def test_a_run_of_another_generation_is_ignored() -> None:
    assert count(0, 3, 7, 2, run(4, running=True, deaths=2)) == Count(1, 0)


def test_the_same_delivery_given_out_again_is_the_same_attempt() -> None:
    same = run(2, running=True, delivered=2, deaths=1, spared=1)
    assert count(0, 2, 7, 1, same) == Count(2, 1, 1)


def test_a_step_whose_worker_died_as_often_as_its_policy_says_while_alone_is_a_poison() -> None:
    assert poisoned(Count(6, deaths=1, spared=5), limit=2) is None
    error = poisoned(Count(5, deaths=2, spared=2), limit=2)
    assert error is not None and error.type == "SuspectedPoison"
    assert "its worker died 2 times while it ran alone" in error.message


def started(step: int, attempt: int, generation: int = 1, branch: int | None = None) -> StepStarted:
    return StepStarted(
        task_id="t",
        status=TaskStatus.RUNNING,
        step=step,
        branch=branch,
        tool="x",
        attempt=attempt,
        time=NOW,
        generation=generation,
    )


def test_a_first_delivery_that_died_before_its_first_beat_counts_by_its_step_started() -> None:
    work = WorkMessage(task_id="t", step=2, tool="x", input=None)
    found = started_by_event(started(2, 1), work, prior=0)
    assert found is not None and count(0, 2, 7, 1, found) == Count(2, spared=1)


def test_a_step_started_of_another_step_branch_generation_or_older_attempt_says_nothing() -> None:
    work = WorkMessage(task_id="t", step=2, tool="x", input=None)
    assert started_by_event(started(1, 1), work, prior=0) is None
    assert started_by_event(started(2, 1, branch=0), work, prior=0) is None
    assert started_by_event(started(2, 1, generation=2), work, prior=0) is None
    assert started_by_event(started(2, 1), work, prior=1) is None
    assert started_by_event(None, work, prior=0) is None


def test_a_recent_running_mark_of_another_worker_names_its_holder() -> None:
    """A delivery that came back leaves the step to a live holder (`run_marks`); its own
    mark, a stopped one, an old one or one without a holder names none."""
    mine = msgspec.structs.replace(run(1, running=True), holder="w1")
    theirs = msgspec.structs.replace(mine, holder="w2")
    assert held_by(theirs, "w1", NOW) == "w2"
    assert held_by(mine, "w1", NOW) is None
    assert held_by(msgspec.structs.replace(theirs, running=False), "w1", NOW) is None
    assert held_by(run(1, running=True), "w1", NOW) is None  # from before holders
    assert held_by(theirs, "w1", NOW + HOLDER_FRESH_FOR) is None
