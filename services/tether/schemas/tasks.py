"""Moved to `plans` (what a client submits), `records` (what is stored of a task), `work`
(what carries it between processes) and `workers` (what workers write of themselves);
every name is kept here for one round."""

from tether.schemas.plans import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    MAX_BRANCHES,
    MAX_DURATION_MS,
    MAX_STEPS,
    Attempts,
    BackoffMs,
    DurationMs,
    Plan,
    RetryOverride,
    StepSpec,
    TaskId,
    TaskSubmit,
    ToolName,
)
from tether.schemas.records import (
    Checkpoint,
    ErrorInfo,
    InputRequest,
    ParentStep,
    TaskRecord,
    TaskStatus,
    Usage,
)
from tether.schemas.runs import StepRun
from tether.schemas.work import DeadLetter, Timer, TokenChunk, WorkMessage
from tether.schemas.workers import Heartbeat, HeldStep, ToolInfo, WorkerBeat

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BACKOFF_MS",
    "MAX_BRANCHES",
    "MAX_DURATION_MS",
    "MAX_STEPS",
    "Attempts",
    "BackoffMs",
    "Checkpoint",
    "DeadLetter",
    "DurationMs",
    "ErrorInfo",
    "Heartbeat",
    "HeldStep",
    "InputRequest",
    "ParentStep",
    "Plan",
    "RetryOverride",
    "StepRun",
    "StepSpec",
    "TaskId",
    "TaskRecord",
    "TaskStatus",
    "TaskSubmit",
    "Timer",
    "TokenChunk",
    "ToolInfo",
    "ToolName",
    "Usage",
    "WorkMessage",
    "WorkerBeat",
]
