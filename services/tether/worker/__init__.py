"""Serving tools: the App registry, the step context and the worker process."""

from tether.worker.app import App, Tool
from tether.worker.context import StepContext
from tether.worker.liveness import Liveness
from tether.worker.results import Child, NeedsInput, NextSteps, Sleep
from tether.worker.retry import RetryPolicy
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
