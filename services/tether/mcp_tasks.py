"""The client side of MCP Tasks 2026-07-28 (the `io.modelcontextprotocol/tasks` extension).

The `mcp` SDK speaks the 2026-07-28 protocol but not this extension, so a client that
wants task handles would have to declare it, claim `resultType: "task"` results and send
`tasks/*` itself. This module does that and nothing else:

```python
from tether.mcp_tasks import start_task, tasks_client, wait_for_task

async with tasks_client("http://127.0.0.1:8765/mcp") as client:
    created = await start_task(client, "search", {"query": "AI trends 2026", "limit": 2})
    task = await wait_for_task(client, created.task_id)
    plain = await client.call_tool("search", {"query": "MCP"})  # still a CallToolResult
```

It imports only the `mcp` client, never the gateway (which pulls in a web server).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, RootModel, TypeAdapter

__all__ = [
    "MODERN_PROTOCOL",
    "TASKS_EXTENSION",
    "TERMINAL_STATUSES",
    "Connection",
    "CreatedTask",
    "TaskIdParams",
    "TaskRequest",
    "TasksExtension",
    "cancel_task",
    "get_task",
    "start_task",
    "tasks_client",
    "update_task",
    "wait_for_task",
]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""SEP-2663's identifier, declared under the client's `capabilities.extensions`."""

MODERN_PROTOCOL = "2026-07-28"
"""The protocol version the extension belongs to: older ones have the tasks utility instead."""

TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""Statuses a task never leaves."""

DEFAULT_POLL_INTERVAL = 1.0
"""Seconds between polls when neither the caller nor the task's `pollIntervalMs` says."""

DEFAULT_TIMEOUT = 300.0
"""Seconds `wait_for_task` (and a plain `call_tool` on a task) waits before giving up."""

Connection = Client | ClientSession
"""Either works: the helpers send through the session of a `Client`."""

_INPUT_REQUESTS: TypeAdapter[dict[str, types.InputRequest]] = TypeAdapter(
    dict[str, types.InputRequest]
)


class _Object(RootModel[dict[str, Any]]):
    """Any JSON object: `tasks/*` results are returned to the caller as they came."""


class TaskIdParams(types.RequestParams):
    """Params of a `tasks/*` request that names one task."""

    task_id: str


class TaskRequest(types.Request[TaskIdParams, str]):
    """A `tasks/*` request naming one task: `tasks/get`, `tasks/cancel` (or 2025's `tasks/result`).

    The method is free-form so the same class serves either generation's verbs.
    """

    method: str
    params: TaskIdParams
    name_param = "taskId"  # SEP-2663: tasks/* carry the task id in the Mcp-Name header


class _UpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class _UpdateRequest(types.Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: _UpdateParams
    name_param = "taskId"


class CreatedTask(types.Result):
    """The 2026-07-28 `CreateTaskResult` (`resultType: "task"`): the handle a task call returns.

    Other fields of the task (`statusMessage`, `createdAt`, `ttlMs`, ...) are kept as extras.
    """

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TasksExtension(ClientExtension):
    """Declares the tasks extension and finishes task handles for a plain `call_tool`.

    A server that sees the extension may answer `tools/call` with a task handle instead
    of the result. `client.call_tool(...)` then polls `tasks/get` until the task ends and
    returns its `CallToolResult`; a question the task asks on the way goes to the
    client's elicitation (or sampling, roots) callback and back by `tasks/update`, as
    the SDK does for an `input_required` result. Ask for the handle itself with
    `start_task`.
    """

    identifier = TASKS_EXTENSION

    def __init__(
        self, *, timeout: float = DEFAULT_TIMEOUT, poll_interval: float | None = None
    ) -> None:
        self.timeout = timeout
        self.poll_interval = poll_interval

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        deadline = anyio.current_time() + self.timeout  # one for the whole call, questions too
        until = TERMINAL_STATUSES | {"input_required"}
        answered: set[str] = set()
        while True:
            task = await wait_for_task(
                ctx.session,
                created.task_id,
                until=until,
                timeout=max(deadline - anyio.current_time(), 0),
                poll_interval=self.poll_interval,
            )
            if task["status"] in TERMINAL_STATUSES:
                return _call_result(task)
            asked = task.get("inputRequests") or {}
            pending = {key: asked[key] for key in asked.keys() - answered}
            if pending:
                answers = await _answer(ctx.session, pending)
                await update_task(ctx.session, created.task_id, answers)
                answered |= pending.keys()
            else:  # answered already: the task has not moved on yet
                await anyio.sleep(_interval(task, self.poll_interval))


def tasks_client(url: str, *, tasks: TasksExtension | None = None, **options: Any) -> Client:
    """An `mcp.Client` on 2026-07-28 that declares the tasks extension.

    `options` go to `Client` (`elicitation_callback`, `read_timeout_seconds`, ...); other
    `extensions` are kept alongside. Pass `tasks` to tune how plain calls wait.
    """
    extensions = [tasks or TasksExtension(), *(options.pop("extensions", None) or ())]
    return Client(url, **{"mode": MODERN_PROTOCOL, **options, "extensions": extensions})


async def start_task(
    client: Connection, tool: str, arguments: dict[str, Any] | None = None
) -> CreatedTask:
    """Call `tool` and return the task handle at once, without waiting for the result.

    The client must declare the extension (see `tasks_client`); a server that answers
    with the result instead of a task raises RuntimeError.
    """
    result = await _session(client).call_tool(tool, arguments, allow_claimed=True)
    if not isinstance(result, CreatedTask):
        raise RuntimeError(
            f"{tool!r} was answered without a task ({type(result).__name__}): "
            f"the server did not see the {TASKS_EXTENSION!r} extension or chose not to"
        )
    return result


async def get_task(client: Connection, task_id: str) -> dict[str, Any]:
    """`tasks/get`: the task as it is now, with its `result` or `inputRequests` once it has them."""
    return await _send(
        client, TaskRequest(method="tasks/get", params=TaskIdParams(task_id=task_id))
    )


async def update_task(
    client: Connection, task_id: str, input_responses: dict[str, Any]
) -> dict[str, Any]:
    """`tasks/update`: answer the task's `inputRequests`, keyed as they were asked."""
    params = _UpdateParams(task_id=task_id, input_responses=input_responses)
    return await _send(client, _UpdateRequest(params=params))


async def cancel_task(client: Connection, task_id: str) -> dict[str, Any]:
    """`tasks/cancel`: ask the server to stop the task; `tasks/get` shows when it has."""
    params = TaskIdParams(task_id=task_id)
    return await _send(client, TaskRequest(method="tasks/cancel", params=params))


async def wait_for_task(
    client: Connection,
    task_id: str,
    *,
    until: Collection[str] = TERMINAL_STATUSES,
    timeout: float = DEFAULT_TIMEOUT,
    poll_interval: float | None = None,
) -> dict[str, Any]:
    """Poll `tasks/get` until the task's status is in `until`; return that task.

    By default that is when it has ended; add `"input_required"` to stop at a question
    (answer it with `update_task`). Between polls it waits `poll_interval` seconds, or
    what the server suggests in `pollIntervalMs`. Raises TimeoutError after `timeout`.
    """
    status = "unknown"
    try:
        with anyio.fail_after(timeout):
            while True:
                task = await get_task(client, task_id)
                status = task["status"]
                if status in until:
                    return task
                await anyio.sleep(_interval(task, poll_interval))
    except TimeoutError:
        wanted = ", ".join(sorted(until))
        raise TimeoutError(
            f"task {task_id} was still {status} after {timeout}s (waiting for {wanted})"
        ) from None


def _session(client: Connection) -> ClientSession:
    return client.session if isinstance(client, Client) else client


async def _send(client: Connection, request: TaskRequest | _UpdateRequest) -> dict[str, Any]:
    return (await _session(client).send_request(request, _Object)).root


def _interval(task: dict[str, Any], poll_interval: float | None) -> float:
    if poll_interval is not None:
        return poll_interval
    suggested = task.get("pollIntervalMs")
    return (
        suggested / 1000 if isinstance(suggested, int) and suggested > 0 else DEFAULT_POLL_INTERVAL
    )


def _call_result(task: dict[str, Any]) -> types.CallToolResult:
    """The ended task as what `tools/call` would have answered, or the error it would have raised.

    A tool that failed is `completed` with an `isError` result; `failed` carries the
    JSON-RPC error of the request itself.
    """
    if "result" in task:
        return types.CallToolResult.model_validate(task["result"])
    if "error" in task:
        raise MCPError.from_error_data(types.ErrorData.model_validate(task["error"]))
    message = task.get("statusMessage") or "no result"
    raise RuntimeError(f"task {task['taskId']} ended {task['status']}: {message}")


async def _answer(session: ClientSession, asked: dict[str, Any]) -> dict[str, Any]:
    """The client's callbacks' answers to a task's `inputRequests`, ready for `tasks/update`."""
    answers: dict[str, Any] = {}
    for key, request in _INPUT_REQUESTS.validate_python(asked).items():
        meta = request.params.meta if request.params else None
        context = ClientRequestContext(session=session, request_id=key, meta=meta)
        answer = await session.dispatch_input_request(context, request)
        if isinstance(answer, types.ErrorData):
            raise MCPError.from_error_data(answer)
        answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    return answers
