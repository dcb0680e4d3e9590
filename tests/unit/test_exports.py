"""Snapshots of the public API: changing an export must be a deliberate edit here."""

from __future__ import annotations

import tether
import tether.schemas as schemas

TETHER_ALL = [
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

SCHEMAS_ALL = [
    "AnyStatusEvent",
    "ApiError",
    "BlobReply",
    "BlobRequest",
    "Cancelled",
    "Checkpoint",
    "Completed",
    "DEFAULT_NAMES",
    "DeadLetter",
    "ErrorCode",
    "ErrorInfo",
    "ErrorReply",
    "Failed",
    "ForkRequest",
    "Heartbeat",
    "InputAnswer",
    "InputRequest",
    "InvalidNameError",
    "ListReply",
    "ListRequest",
    "Names",
    "ResultReply",
    "ResultRequest",
    "RetryOverride",
    "RunStarted",
    "SessionMessage",
    "SessionState",
    "StatusEvent",
    "StepCompleted",
    "StepRetrying",
    "StepSpec",
    "StepStarted",
    "SubmitReply",
    "SubmitRequest",
    "Submitted",
    "TaskRecord",
    "TaskRequest",
    "TaskStatus",
    "TaskSubmit",
    "TokenChunk",
    "ToolInfo",
    "Usage",
    "Waiting",
    "WorkMessage",
    "validate_task_id",
    "validate_tool_name",
]


def test_tether_exports_snapshot() -> None:
    assert sorted(tether.__all__) == TETHER_ALL


def test_schemas_exports_snapshot() -> None:
    assert sorted(schemas.__all__) == SCHEMAS_ALL


def test_exports_have_no_duplicates() -> None:
    assert len(set(tether.__all__)) == len(tether.__all__)
    assert len(set(schemas.__all__)) == len(schemas.__all__)


def test_every_export_exists() -> None:
    missing = [n for n in tether.__all__ if not hasattr(tether, n)]
    missing += [n for n in schemas.__all__ if not hasattr(schemas, n)]
    assert missing == []


def test_star_import_gives_exactly_the_exports() -> None:
    scope: dict[str, object] = {}
    exec("from tether import *", scope)
    assert sorted(k for k in scope if k != "__builtins__") == TETHER_ALL
    scope = {}
    exec("from tether.schemas import *", scope)
    assert sorted(k for k in scope if k != "__builtins__") == SCHEMAS_ALL


def test_shared_types_are_the_same_objects() -> None:
    assert tether.TaskRecord is schemas.TaskRecord
    assert tether.TaskStatus is schemas.TaskStatus
    assert tether.Step is schemas.StepSpec


def test_the_cli_port_defaults_are_the_services() -> None:
    from tether.cli.common import DEFAULT_GATEWAY_PORT, DEFAULT_UI_PORT
    from tether.gateway import DEFAULT_PORT
    from tether.ui import DEFAULT_PORT as DASHBOARD_PORT

    assert DEFAULT_GATEWAY_PORT == DEFAULT_PORT
    assert DEFAULT_UI_PORT == DASHBOARD_PORT


TOOLS_ALL = [
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


def test_the_tool_authors_api_is_its_own_package() -> None:
    import tether.tools as tools

    assert sorted(tools.__all__) == TOOLS_ALL
    for name in TOOLS_ALL:
        if name in tether.__all__:
            assert getattr(tether, name) is getattr(tools, name), name


def test_the_worker_package_exports_the_host_only() -> None:
    """A tool author imports from `tether.tools` (or `tether`): the worker package's
    re-exports of those names were removed after round 4."""
    import tether.worker as worker

    assert sorted(worker.__all__) == ["Liveness", "Worker"]
    for name in ("App", "Child", "NeedsInput", "NextSteps", "RetryPolicy", "Sleep", "Tool"):
        assert not hasattr(worker, name), name
