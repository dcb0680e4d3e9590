"""Which tasks may be told something (`send_message`, `update_agent`): a pure rule.

A running or waiting agent reads what it is told before its next LLM call. A finished
one reads nothing more, except that a failed task may take new settings: `tether dlq
retry` runs it on from the step that failed, and that step reads them first, so a task
failed by its spent budget is raised with `update_agent`, then retried, as its error says.
"""

from __future__ import annotations

from tether.schemas.events import AgentUpdated, Steering
from tether.schemas.records import TaskRecord, TaskStatus


def steering_refusal(record: TaskRecord, kind: type[Steering]) -> str | None:
    """Why `record` cannot be told a `kind` now (None: it can)."""
    if not record.status.is_terminal:
        return None
    if record.status is TaskStatus.FAILED and kind is AgentUpdated:
        return None  # read by its retry, before the call that failed is made again
    if record.status is TaskStatus.FAILED:
        return (
            f"task {record.task_id!r} failed: it reads no more messages (update_agent may "
            "still change its settings, then 'tether dlq retry' runs it on with them)"
        )
    return (
        f"task {record.task_id!r} is {record.status.value}: a finished agent reads no more "
        "messages; ask it a follow-up instead (continue_agent)"
    )
