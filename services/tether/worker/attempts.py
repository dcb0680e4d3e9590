"""One attempt of a step in this process, ended exactly once with one outcome.

Metrics and the attempt's trace span are fed from that end, never inferred from status
events: a step cancelled mid-run, one that waits for input, starts a child or is handed
on to another worker emits no event that says its attempt is over, but it is.
"""

from __future__ import annotations

import contextlib
import logging
import time
from enum import Enum
from typing import Protocol

from tether import tracing
from tether.schemas.records import ErrorInfo, TaskRecord, Usage
from tether.schemas.work import WorkMessage
from tether.worker.decisions import Failure, GiveUp, Retry

log = logging.getLogger("tether.worker")


class Outcome(str, Enum):
    COMPLETED = "completed"
    RETRIED = "retried"
    FAILED = "failed"
    CANCELLED = "cancelled"
    """The task was cancelled (or ended elsewhere) while the step ran."""
    WAITING = "waiting"
    """The step asked a person (`NeedsInput`)."""
    CHILD = "child"
    """The step started a child task and completes with its result."""
    HANDED_ON = "handed_on"
    """Left for another delivery: the worker stopped, or NATS stayed away."""


class Failed(Exception):
    """An attempt failed; `failure` says how (see `decisions.classify`), `usage` what it
    spent before it did."""

    def __init__(self, failure: Failure, usage: Usage | None = None) -> None:
        self.failure = failure
        self.usage = usage


class TaskEnded(Exception):
    """The task was cancelled (or failed elsewhere) while the step ran, after spending
    `usage`."""

    def __init__(self, usage: Usage | None = None) -> None:
        self.usage = usage


def give_up(error: ErrorInfo) -> Failed:
    return Failed(Failure(error, retryable=False))


class AttemptObserver(Protocol):
    """Told of every attempt's start and end (`tether.metrics.Metrics`)."""

    def attempt_started(self, tool: str) -> None: ...
    def attempt_ended(self, tool: str, outcome: Outcome, seconds: float) -> None: ...


class Attempt:
    """A running attempt: its span is open (the tool runs inside it) until `end`."""

    def __init__(
        self,
        record: TaskRecord,
        work: WorkMessage,
        attempt: int,
        agent: bool,
        observer: AttemptObserver | None,
    ) -> None:
        self._tool = tool = work.tool
        self._observer = observer
        self._scope: contextlib.ExitStack | None = None
        self._span = None
        if tracing.enabled():  # else no span, and nothing held per running step for one
            self._scope = contextlib.ExitStack()
            self._span = self._scope.enter_context(
                tracing.step_span(record, work.step, work.branch, tool, attempt, agent)
            )
        self._began = time.monotonic()
        self.outcome: Outcome | None = None
        if observer is not None:
            observer.attempt_started(tool)

    def end(self, outcome: Outcome, error: BaseException | None = None) -> None:
        """The attempt's one end; later calls change nothing."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        if self._scope is not None:
            tracing.outcome(self._span, outcome.value, error)
            self._scope.close()
        if self._observer is not None:
            self._observer.attempt_ended(self._tool, outcome, time.monotonic() - self._began)


def log_failure(
    work: WorkMessage,
    attempt: int,
    error: ErrorInfo,
    decided: Retry | GiveUp,
    expected: bool = False,
    explained: bool = False,
) -> None:
    """Each failed attempt in the worker's log with its traceback: WARNING while it is
    retried, ERROR when the step gives up; an expected outcome (`worker.expected`, a
    guardrail's refusal) is one INFO line without one. An error that `explained` itself
    (a RetryableError: a model it cannot reach, a rate limit) is said once, in one
    WARNING line at the step's first failure; its later retries are DEBUG lines (the
    task's events count them), its end one ERROR line, its traceback kept on the task
    (`tether status --verbose`)."""
    where = f"step {work.step}" + (f"[{work.branch}]" if work.branch is not None else "")
    what = f"task {work.task_id} {where} {work.tool}, attempt {attempt}: {error.type}: "
    what += error.message
    if expected:
        log.info("%s; the task fails with it", what)
        return
    if isinstance(decided, Retry):
        what += f"; retrying in {decided.delay.total_seconds():.1f}s"
        if explained:
            log.log(logging.WARNING if attempt == 1 else logging.DEBUG, "%s", what)
            return
        level = logging.WARNING
    else:
        what += "; giving up"
        if explained:
            log.error("%s", what)
            return
        level = logging.ERROR
    if error.traceback:
        what += "\n" + error.traceback
    log.log(level, "%s", what)
