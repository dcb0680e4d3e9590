"""Tether: durable execution for AI agents on NATS JetStream.

```python
from tether import App, Client, StepContext, run_sync
```

Names load on first use, so `tether --help` and `tether status` do not pay for the
worker, the API and the MCP gateway.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.agents import Agent, BudgetExceeded, OpenAIModel, Price
    from tether.client import Client, TaskHandle
    from tether.dispatcher import Dispatcher
    from tether.errors import (
        GuardrailTripped,
        InvalidTaskError,
        MessageRefusedError,
        MessageTakenError,
        MessageTooLargeError,
        NatsUnavailableError,
        RetryableError,
        SessionClosedError,
        SessionError,
        TaskCancelledError,
        TaskConflictError,
        TaskError,
        TaskExistsError,
        TaskFailedError,
        TaskNotFoundError,
        TaskTimeoutError,
        TerminalError,
        TetherError,
        UnservedToolWarning,
    )
    from tether.local import run, run_sync
    from tether.nats import Layout, NatsConfig, NatsServer
    from tether.schemas.plans import RetryOverride
    from tether.schemas.plans import StepSpec as Step
    from tether.schemas.records import TaskRecord, TaskStatus, Usage
    from tether.schemas.work import TokenChunk
    from tether.sessions import Session, SessionUpdate
    from tether.tasks.plans import Parallel
    from tether.tools import (
        App,
        Child,
        NeedsInput,
        NextSteps,
        RetryPolicy,
        Sleep,
        StepContext,
    )
    from tether.worker import Worker

_HOMES = {
    "tether.agents": ["Agent", "BudgetExceeded", "OpenAIModel", "Price"],
    "tether.client": ["Client", "TaskHandle"],
    "tether.dispatcher": ["Dispatcher"],
    "tether.errors": [
        "GuardrailTripped",
        "InvalidTaskError",
        "MessageRefusedError",
        "MessageTakenError",
        "MessageTooLargeError",
        "NatsUnavailableError",
        "RetryableError",
        "SessionClosedError",
        "SessionError",
        "TaskCancelledError",
        "TaskConflictError",
        "TaskError",
        "TaskExistsError",
        "TaskFailedError",
        "TaskNotFoundError",
        "TaskTimeoutError",
        "TerminalError",
        "TetherError",
        "UnservedToolWarning",
    ],
    "tether.local": ["run", "run_sync"],
    "tether.nats": ["Layout", "NatsConfig", "NatsServer"],
    "tether.schemas.plans": ["RetryOverride"],
    "tether.schemas.records": ["TaskRecord", "TaskStatus", "Usage"],
    "tether.schemas.work": ["TokenChunk"],
    "tether.sessions": ["Session", "SessionUpdate"],
    "tether.tasks.plans": ["Parallel"],
    "tether.tools": [
        "App",
        "Child",
        "NeedsInput",
        "NextSteps",
        "RetryPolicy",
        "Sleep",
        "StepContext",
    ],
    "tether.worker": ["Worker"],
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}
_RENAMED = {"Step": ("tether.schemas.plans", "StepSpec")}

__all__ = [
    "Agent",
    "App",
    "BudgetExceeded",
    "Child",
    "Client",
    "Dispatcher",
    "GuardrailTripped",
    "InvalidTaskError",
    "Layout",
    "MessageRefusedError",
    "MessageTakenError",
    "MessageTooLargeError",
    "NatsConfig",
    "NatsServer",
    "NatsUnavailableError",
    "NeedsInput",
    "NextSteps",
    "OpenAIModel",
    "Parallel",
    "Price",
    "RetryOverride",
    "RetryPolicy",
    "RetryableError",
    "Session",
    "SessionClosedError",
    "SessionError",
    "SessionUpdate",
    "Sleep",
    "Step",
    "StepContext",
    "TaskCancelledError",
    "TaskConflictError",
    "TaskError",
    "TaskExistsError",
    "TaskFailedError",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskRecord",
    "TaskStatus",
    "TaskTimeoutError",
    "TerminalError",
    "TetherError",
    "TokenChunk",
    "UnservedToolWarning",
    "Usage",
    "Worker",
    "run",
    "run_sync",
]


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        module, attribute = _RENAMED[name]
    elif name in _WHERE:
        module, attribute = _WHERE[name], name
    else:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
