"""The tool author's API: the `App` registry, `Tool`, `StepContext`, what a tool may
return and `RetryPolicy` (the worker package is the host that runs them)."""

from tether.tools.app import App, ToolSource
from tether.tools.context import StepContext
from tether.tools.results import Child, NeedsInput, NextSteps, Sleep
from tether.tools.retry import RetryPolicy
from tether.tools.tool import Tool

__all__ = [
    "App",
    "Child",
    "NeedsInput",
    "NextSteps",
    "RetryPolicy",
    "Sleep",
    "StepContext",
    "Tool",
    "ToolSource",
]
