"""Tether: durable execution for AI agents on NATS JetStream.

```python
from services import App, Client, StepContext
```
"""

from schemas.tasks import StepSpec as Step
from schemas.tasks import TaskRecord, TaskStatus
from services.client import Client, TaskHandle
from services.dispatcher import Dispatcher
from services.errors import (
    InvalidTaskError,
    NatsUnavailableError,
    RetryableError,
    TaskCancelledError,
    TaskConflictError,
    TaskError,
    TaskExistsError,
    TaskFailedError,
    TaskNotFoundError,
    TaskTimeoutError,
    TerminalError,
    TetherError,
)
from services.nats import Layout, NatsConfig, NatsServer
from services.worker import App, NeedsInput, NextSteps, RetryPolicy, StepContext, Worker

__all__ = [
    "App",
    "Client",
    "Dispatcher",
    "InvalidTaskError",
    "Layout",
    "NatsConfig",
    "NatsServer",
    "NatsUnavailableError",
    "NeedsInput",
    "NextSteps",
    "RetryPolicy",
    "RetryableError",
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
    "Worker",
]
