"""Which attempt a delivery is, from the step's last run (pure, no I/O).

A message's delivery count says how often JetStream handed it out, not how often its step
ran: a worker that dies with messages fetched and not yet started would cost each of them
an attempt, and one that crash-loops (a poison input, OOM) would fail innocent tasks with
`RetriesExhausted`. So an attempt counts only once it has left a `StepRun`: written before
the tool runs on a delivery that came back, and at the first beat (half a heartbeat in)
on a first delivery, so the hot path writes nothing more. A delivery that finds its step's
last run still `running` knows that run's worker died (or stalled past the ack wait): it
counts one attempt, as in Temporal, and one death; a step during which its worker died
`DEATHS_LIMIT` times is given up as a suspected poison.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.schemas.events import AnyStatusEvent, StepStarted
from tether.schemas.tasks import ErrorInfo, StepRun, WorkMessage

DEATHS_LIMIT = 3


@dataclass(frozen=True)
class Count:
    attempt: int
    deaths: int


def runs_elsewhere(last: StepRun | None, sequence: int, delivered: int) -> bool:
    """Whether a later delivery of this same message started the step: this one is left
    to it (it came back here after NATS was away, and its ack wait had run out)."""
    return (
        last is not None
        and last.running
        and last.sequence == sequence
        and last.delivered > delivered
    )


def count(
    prior: int, delivered: int, sequence: int, generation: int, last: StepRun | None
) -> Count:
    """The attempt this delivery runs, and the deaths so far; `prior` is the attempts of
    the messages this one replaced (`Tether-Prior-Attempts`)."""
    if last is None or last.generation != generation:
        return Count(prior + 1, 0)  # no delivery before this one started: none counts
    if last.sequence == sequence and last.delivered >= delivered:
        return Count(last.attempt, last.deaths)  # this very delivery, given out again
    if last.running:  # it started and never ended: its worker died
        return Count(max(prior, last.attempt) + 1, last.deaths + 1)
    return Count(max(prior, last.attempt) + 1, last.deaths)  # failed, and sent back


def started_by_event(last: AnyStatusEvent | None, work: WorkMessage, prior: int) -> StepRun | None:
    """A first delivery that died before its first beat wrote no `StepRun`, but its
    `step_started` went out before its tool ran: when that is still the task's last event,
    the attempt started (and its worker died)."""
    if (
        not isinstance(last, StepStarted)
        or (last.step, last.branch, last.generation) != (work.step, work.branch, work.generation)
        or last.attempt is None
        or last.attempt <= prior
    ):
        return None
    return StepRun(
        generation=work.generation,
        attempt=last.attempt,
        sequence=0,
        delivered=0,
        running=True,
        time=last.time,
    )


def poisoned(counted: Count, limit: int = DEATHS_LIMIT) -> ErrorInfo | None:
    """Why the step is given up without running, when its worker died too often in it."""
    if counted.deaths < limit:
        return None
    return ErrorInfo(
        type="SuspectedPoison",
        message=f"its worker died {counted.deaths} times while it ran, so it is not run "
        "again: its input may crash the worker (out of memory, a crash in native code, "
        "an exit); the message is kept in the dead letters (tether dlq)",
    )
