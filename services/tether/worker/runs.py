"""Which attempt a delivery is, from the step's last run, and whether it must run alone
(pure, no I/O).

A message's delivery count says how often JetStream handed it out, not how often its step
ran: a worker that dies with messages fetched and not yet started would cost each of them
an attempt. So an attempt counts only once it has left a `StepRun`: written before the
tool runs on a delivery that came back, and at the first beat (half a heartbeat in) on a
first delivery, so the hot path writes nothing more. A delivery that finds its step's last
run still `running` knows that run's worker died (or stalled past the ack wait).

A death is evidence against a step only when the step ran alone in its process, as in a
bisection: otherwise any step beside it may have caused it. So:
1. a death while other steps may have run beside it makes the step a suspect (`spared`)
   and costs it no attempt: its retry policy is charged `Count.charged` attempts;
2. a step that has died twice, in any way, runs alone (`Count.alone`): its process takes
   no other step meanwhile, and a death then is its own (`deaths`);
3. `RetryPolicy.poison_after` such deaths give it up as `SuspectedPoison`.
One ordinary crash (a SIGKILL, an OOM kill, a node lost) thus serialises nothing: every
step it held runs again at once, in parallel, and keeps its attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tether.schemas.events import AnyStatusEvent, StepStarted
from tether.schemas.records import ErrorInfo
from tether.schemas.runs import StepRun
from tether.schemas.work import WorkMessage

ALONE_AFTER = 2
"""Deaths of any kind after which a step runs alone in its process."""


@dataclass(frozen=True)
class Count:
    attempt: int
    """The run's number: every run that started has its own (events, token streams)."""
    deaths: int = 0
    """Runs alone in their process during which the worker died."""
    spared: int = 0
    """Runs lost to a death while other steps ran beside them."""

    @property
    def charged(self) -> int:
        """The attempts the step's retry policy counts: this one and every earlier one that
        ended, or died with the step alone."""
        return self.attempt - self.spared

    @property
    def alone(self) -> bool:
        """Whether this run must have its process to itself (rule 2)."""
        return self.deaths + self.spared >= ALONE_AFTER


def runs_elsewhere(last: StepRun | None, sequence: int, delivered: int) -> bool:
    """Whether a later delivery of this same message started the step: this one is left
    to it (it came back here after NATS was away, and its ack wait had run out)."""
    return (
        last is not None
        and last.running
        and last.sequence == sequence
        and last.delivered > delivered
    )


HOLDER_FRESH_FOR = timedelta(minutes=10)
"""How long a running mark of a live worker keeps a delivery that came back off its step:
longer than any hold can fail while its worker still beats, short enough that a worker
that lost a step without saying so cannot keep it from running for ever."""


def held_by(last: StepRun | None, holder: str, now: datetime) -> str | None:
    """The other worker whose attempt of the step is running, when its mark is recent:
    a delivery that came back while that worker is alive (its ack wait ran out while it
    was busy, or NATS was away) must not run the step beside it."""
    if last is None or not last.running or last.holder in ("", holder):
        return None
    return last.holder if now - last.time < HOLDER_FRESH_FOR else None


def count(
    prior: int, delivered: int, sequence: int, generation: int, last: StepRun | None
) -> Count:
    """The attempt this delivery runs, and the deaths so far; `prior` is the attempts of
    the messages this one replaced (`Tether-Prior-Attempts`)."""
    if last is None or last.generation != generation:
        return Count(prior + 1)  # no delivery before this one started: none counts
    if last.sequence == sequence and last.delivered >= delivered:
        return Count(last.attempt, last.deaths, last.spared)  # this very delivery, again
    if last.waiting:  # counted, never started: its worker died before it could run alone
        return Count(max(prior + 1, last.attempt), last.deaths, last.spared)
    after = max(prior, last.attempt) + 1
    if last.running and last.alone:  # it died alone: its own death
        return Count(after, last.deaths + 1, last.spared)
    if last.running:  # it died beside others: a suspect, its attempt not charged
        return Count(after, last.deaths, last.spared + 1)
    return Count(after, last.deaths, last.spared)  # failed, and sent back


def started_by_event(last: AnyStatusEvent | None, work: WorkMessage, prior: int) -> StepRun | None:
    """A first delivery that died before its first beat wrote no `StepRun`, but its
    `step_started` went out before its tool ran: when that is still the task's last event,
    the attempt started, in the worker it names (which died, or is late)."""
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
        holder=last.worker or "",
    )


def poisoned(counted: Count, limit: int) -> ErrorInfo | None:
    """Why the step is given up without running: its worker died `limit` times while it
    ran alone."""
    if counted.deaths < limit:
        return None
    return ErrorInfo(
        type="SuspectedPoison",
        message=f"its worker died {counted.deaths} times while it ran alone, so it is not run "
        "again: its input may crash the worker (out of memory, a crash in native code, "
        "an exit); the message is kept in the dead letters (tether dlq)",
    )
