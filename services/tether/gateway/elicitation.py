"""Waiting tasks on a 2025-11-25 connection: ask the client with `elicitation/create`.

The question rides the stream of the request that is waiting for the task (a
`tasks/result`, or a tool call made without a task), tagged with the related task.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from pydantic import ValidationError

from tether.gateway.backend import TaskBackend
from tether.gateway.inputs import elicitation_params, input_key
from tether.gateway.protocol import related_task_meta, supports_form_elicitation
from tether.schemas.records import TaskRecord

log = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]


async def elicit(ctx: Context, record: TaskRecord) -> dict[str, Any] | None:
    """Ask the client the task's question; its `{"action", "content"}`, or None if it could not."""
    if record.input_request is None:
        return None
    params = {
        **elicitation_params(record.input_request),
        "_meta": related_task_meta(record.task_id),
    }
    request = types.ElicitRequest(params=types.ElicitRequestFormParams.model_validate(params))
    try:
        result = await ctx.session.send_request(
            request,
            types.ElicitResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
    except (MCPError, ValidationError) as exc:
        log.info("task %s: the client did not answer the elicitation: %s", record.task_id, exc)
        return None
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def follow(backend: TaskBackend, ctx: Context, task_id: str, *, give_up: bool) -> TaskRecord:
    """Follow the task to its end, asking the client whenever it waits for input.

    With `give_up`, return the waiting record when the client cannot answer (it has no
    form elicitation, or it dismissed the form); otherwise keep waiting, since the
    answer may come another way (another client, `tether input`).
    """
    answered: set[str] = set()
    can_ask = supports_form_elicitation(ctx.session.client_capabilities)
    while True:
        record = await backend.settle(task_id, answered)
        if record.status.is_terminal:
            return record
        answered.add(input_key(record))
        response = await elicit(ctx, record) if can_ask else None
        if response is not None:
            await backend.respond(record, response)
        if give_up and (response is None or response.get("action") == "cancel"):
            return record
