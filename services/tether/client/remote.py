"""The task actions (submit, cancel, retry, answer, fork, steer) and the operator's
deploys asked of the API service rather than done here: for a process whose NATS user
may read tasks but not write them (the MCP gateway and the dashboard under
`deploy/nats/roles.conf`), so a compromised one cannot rewrite a task's record,
checkpoints or work. The seam's `ask` owns the transport: a subject the server refuses
this user fails at once with NotAllowedError (nats-py would wait out the timeout, then
blame the API)."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from tether.client.actions import queue
from tether.nats.requests import ask
from tether.nats.store import Store
from tether.schemas.api import (
    ErrorReply,
    ForkRequest,
    InputAnswer,
    MessageRequest,
    TaskRequest,
    UpdateAgentRequest,
    raised,
)
from tether.schemas.builds import BuildsReply, DeployRequest
from tether.schemas.codec import encode
from tether.schemas.plans import TaskSubmit
from tether.schemas.records import TaskRecord

ACTION_TIMEOUT = 30.0
"""Seconds an action waits for the API's answer."""

_error_decoder = msgspec.json.Decoder(ErrorReply)
_record_decoder = msgspec.json.Decoder(TaskRecord)
_builds_decoder = msgspec.json.Decoder(BuildsReply)
R = TypeVar("R")


class RemoteActions:
    def __init__(self, store: Store, timeout: float = ACTION_TIMEOUT) -> None:
        self._store = store
        self._timeout = timeout

    async def submit(self, submit: TaskSubmit) -> None:
        """Through the submit queue, which the dispatcher records (no API verb needed)."""
        await queue(self._store, submit)

    async def cancel(self, task_id: str) -> TaskRecord:
        return await self._call("cancel", TaskRequest(task_id=task_id), task_id)

    async def retry(self, task_id: str) -> None:
        await self._call("retry", TaskRequest(task_id=task_id), task_id)

    async def send_input(self, task_id: str, data: Any) -> None:
        await self._call("input", InputAnswer(task_id=task_id, data=data), task_id)

    async def fork(self, task_id: str, from_step: int, input: Any, new_task_id: str) -> None:
        request = ForkRequest(
            task_id=task_id, from_step=from_step, input=input, new_task_id=new_task_id
        )
        await self._call("fork", request, new_task_id)

    async def send_message(self, task_id: str, text: str, message_id: str) -> None:
        request = MessageRequest(task_id=task_id, text=text, message_id=message_id)
        await self._call("message", request, task_id)

    async def update_agent(self, task_id: str, update_id: str, **changes: Any) -> None:
        request = UpdateAgentRequest(task_id=task_id, update_id=update_id, **changes)
        await self._call("update_agent", request, task_id)

    async def deploy(self, request: DeployRequest) -> BuildsReply:
        """Ramp, promote or roll back a build: the operator's (`tether.api.deploy`)."""
        return await self._ask("deploy", request, request.build, _builds_decoder)

    async def _call(self, verb: str, request: msgspec.Struct, task_id: str) -> TaskRecord:
        return await self._ask(verb, request, task_id, _record_decoder)

    async def _ask(
        self, verb: str, request: msgspec.Struct, task_id: str, decoder: msgspec.json.Decoder[R]
    ) -> R:
        subject = self._store.names.api_subject(verb)
        unanswered = (
            f"no API service answered {subject}: this process acts on tasks through "
            "the API; start 'tether dispatcher' (it serves the API) or 'tether api'"
        )
        data = await ask(self._store, subject, encode(request), self._timeout, unanswered)
        try:
            refused = _error_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return decoder.decode(data)
        raise raised(refused, task_id)
