"""The worker host: serves an app's tools, one message and one attempt at a time, with
custody, succession and liveness. What a tool author imports lives in `tether.tools`
(re-exported here for one round)."""

from tether.tools import App, Child, NeedsInput, NextSteps, RetryPolicy, Sleep, StepContext, Tool
from tether.worker.liveness import Liveness
from tether.worker.worker import Worker

__all__ = [
    "App",
    "Child",
    "Liveness",
    "NeedsInput",
    "NextSteps",
    "RetryPolicy",
    "Sleep",
    "StepContext",
    "Tool",
    "Worker",
]
