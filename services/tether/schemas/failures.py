"""The failure types Tether itself writes into `ErrorInfo.type`."""

from __future__ import annotations

from enum import StrEnum


# A StrEnum (a `str, Enum` whose str() and f-strings give its value), so a message that
# formats an error's type reads the same whether the type came off the wire or not.
class FailureType(StrEnum):
    """The `ErrorInfo.type` values Tether itself writes. A tool's own failure carries its
    exception's name instead, so `ErrorInfo.type` stays a string on the wire."""

    INVALID_TASK = "InvalidTask"
    """The dispatcher rejected a submission (bad id, steps, override, or an unknown tool
    with `strict`)."""
    INVALID_MESSAGE = "InvalidMessage"
    """A work message a worker cannot use: undecodable, for another tool, for no task,
    or not matching the plan."""
    INVALID_INPUT = "InvalidInput"
    """A step's input does not fit its tool's input type."""
    INVALID_PLAN = "InvalidPlan"
    """Added steps or a child's plan that cannot run, or a child id taken by another task."""
    INVALID_OUTPUT = "InvalidOutput"
    """A step's output is not JSON, or a branch returned what only a step may."""
    OUTPUT_TOO_LARGE = "OutputTooLarge"
    """A checkpoint or record that would not fit a NATS message."""
    BLOB_NOT_FOUND = "BlobNotFound"
    """An input reference whose object is gone."""
    BUILD_GONE = "BuildGone"
    """A step pinned to a build no worker runs any more, and none will."""
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    """The task's deadline passed."""
    INPUT_EXPIRED = "InputExpired"
    """No answer to an input request by its `expires_at`."""
    STEP_TIMEOUT = "StepTimeout"
    """A step ran past its timeout (retryable)."""
    RETRIES_EXHAUSTED = "RetriesExhausted"
    """Every attempt was lost to a crash or timeout, with no error to report."""
    SUSPECTED_POISON = "SuspectedPoison"
    """The step's worker died in it too often: it is not run again."""
    CHILD_FAILED = "ChildFailed"
    """A child task failed, so its parent's step does."""
    CHILD_CANCELLED = "ChildCancelled"
    """A child task was cancelled, so its parent's step fails."""
