"""Serving tools: the App registry, the step context and the worker process."""

from services.worker.app import App, Tool
from services.worker.context import StepContext
from services.worker.results import NeedsInput, NextSteps
from services.worker.retry import RetryPolicy
from services.worker.worker import Worker

__all__ = ["App", "NeedsInput", "NextSteps", "RetryPolicy", "StepContext", "Tool", "Worker"]
