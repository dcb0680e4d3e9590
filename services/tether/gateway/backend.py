"""The Tether side of the gateway: create, read, wait for and answer tasks through a `Client`.

Nothing here remembers a task: every answer is read from the task record, so any
gateway replica can serve any request about any task.
"""

from __future__ import annotations

import secrets
from collections.abc import Container
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tether.agents.owners import MCP_METADATA_KEY
from tether.client import Client
from tether.errors import (
    InvalidTaskError,
    TaskConflictError,
    TaskNotFoundError,
    TaskTimeoutError,
)
from tether.gateway import errors
from tether.gateway.callers import public_key, seal
from tether.gateway.follow_ups import check_follow_ups
from tether.gateway.inputs import AnswerError, answer, input_key
from tether.gateway.tasks import Whereabouts, owner
from tether.gateway.tools import RUN_PLAN, plan_steps, tool_step
from tether.schemas.ids import InvalidNameError, validate_task_id
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus


@dataclass(frozen=True)
class GatewayOptions:
    """How the gateway behaves towards MCP clients."""

    poll_interval: timedelta = timedelta(seconds=1)
    """Suggested to clients as `pollInterval` / `pollIntervalMs`."""
    create_timeout: timedelta = timedelta(seconds=10)
    """How long a task-augmented call waits for a dispatcher to record the new task."""
    path: str = "/mcp"
    """The Streamable HTTP endpoint."""

    @property
    def poll_interval_ms(self) -> int:
        return int(self.poll_interval.total_seconds() * 1000)


def new_task_id() -> str:
    """A task id with 128 bits from the OS's CSPRNG: ids are bearer tokens for task state."""
    return secrets.token_hex(16)


class TaskBackend:
    def __init__(
        self, client: Client, options: GatewayOptions, seal_key: bytes | None = None
    ) -> None:
        self.client = client
        self.options = options
        self.seal_key = seal_key
        """Seals each task to its caller (see `callers.seal`); None: no callers."""

    def owner(self, record: TaskRecord) -> str | None:
        return owner(record, self.seal_key)

    async def record(self, task_id: str, caller: str | None = None) -> TaskRecord:
        """The task's record; the spec's invalid-params error when there is none, or when
        it belongs to another caller (who must not learn that it exists)."""
        try:
            validate_task_id(task_id)
            record = await self.client.get(task_id)
        except (InvalidNameError, TaskNotFoundError):
            raise errors.task_not_found(task_id) from None
        if caller is not None and self.owner(record) != caller:
            raise errors.task_not_found(task_id)
        return record

    async def whereabouts(self, record: TaskRecord) -> Whereabouts:
        """The running step's latest heartbeat, and what a stalled task waits for: what
        the status message says beyond the record."""
        heartbeat = None
        if record.status is TaskStatus.RUNNING:
            heartbeat = await self.client.heartbeat(record.task_id)
        return Whereabouts(heartbeat, await self.client.stall(record))

    async def submit(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        ttl_ms: int | None,
        caller: str | None = None,
    ) -> TaskRecord:
        """Start a task for a tool call and return its record once a dispatcher created it.

        Waiting for the record means a `tasks/get` on any replica finds the task as soon
        as the client has its id (the 2026-07-28 spec requires it).
        """
        steps = await self._steps(name, arguments)
        await check_follow_ups(steps, self.client.tool, lambda after: self.record(after, caller))
        request: dict[str, Any] = {"tool": name}
        if ttl_ms is not None:
            request["ttl_ms"] = ttl_ms
        task_id = new_task_id()
        if caller is not None and self.seal_key is not None:
            request["caller"] = caller  # the task is bound to it, under this gateway's seal
            request["key"] = public_key(self.seal_key)
            request["seal"] = seal(self.seal_key, task_id, caller)
        try:
            handle = await self.client.submit(
                steps, task_id=task_id, metadata={MCP_METADATA_KEY: request}
            )
        except InvalidTaskError as exc:
            raise errors.invalid_params(str(exc)) from None
        seconds = self.options.create_timeout.total_seconds()
        try:
            return await handle.wait_for(lambda record: True, timeout=seconds)
        except TaskTimeoutError:
            raise errors.not_created(handle.task_id, seconds) from None

    async def _steps(self, name: str, arguments: dict[str, Any] | None) -> list[StepSpec]:
        try:
            if name == RUN_PLAN:
                return plan_steps(arguments)
            info = await self.client.tool(name)
            if info is None:
                raise errors.unknown_tool(name)
            return [tool_step(info, arguments)]
        except InvalidTaskError as exc:
            raise errors.invalid_params(str(exc)) from None

    async def settle(self, task_id: str, answered: Container[str] = ()) -> TaskRecord:
        """The record once the task has ended or asks a question not in `answered`.

        A task stays `waiting` until a worker takes the answer, so the key of an
        answered question is remembered rather than the status alone.
        """

        def settled(record: TaskRecord) -> bool:
            if record.status.is_terminal:
                return True
            return record.status is TaskStatus.WAITING and input_key(record) not in answered

        return await self.client.handle(task_id).wait_for(settled)

    async def respond(self, record: TaskRecord, response: dict[str, Any]) -> None:
        """Apply an elicitation response (`{"action", "content"}`) to a waiting task.

        `accept` sends the answer, and the task resumes at the next step without running
        the step that asked again; `decline` cancels the task, which cannot go on
        without an answer; `cancel` (dismissed) leaves it waiting for a later answer.
        A task that was answered or ended meanwhile is left as it is.
        """
        action = response.get("action")
        request = record.input_request
        if record.status is not TaskStatus.WAITING or request is None:
            return
        try:
            if action == "accept":
                content = response.get("content")
                value = answer(request, content if isinstance(content, dict) else None)
                await self.client.send_input(record.task_id, value)
            elif action == "decline":
                await self.client.cancel(record.task_id)
        except AnswerError as exc:
            raise errors.invalid_params(f"task {record.task_id!r}: {exc}") from None
        except InvalidTaskError as exc:  # the answer does not match the request's schema
            raise errors.invalid_params(str(exc)) from None
        except TaskConflictError:
            pass

    async def cancel(self, task_id: str, caller: str | None = None) -> TaskRecord | None:
        """Cancel the task; None when it had already ended (the record stays as it was)."""
        await self.record(task_id, caller)
        try:
            return await self.client.cancel(task_id)
        except TaskConflictError:
            return None
