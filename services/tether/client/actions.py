"""What `Client` does to tasks, as one protocol with two implementations picked once at
`connect()`: `LocalActions` writes here (records, checkpoints, work) and
`RemoteActions` (client/remote.py) asks the API service, for a NATS user that may read
tasks but not write them."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from tether import tracing
from tether.client.handle import TaskHandle
from tether.deploys import actions as deploys
from tether.errors import NotAllowedError, TaskExistsError, TaskTimeoutError
from tether.nats.requests import allowed
from tether.nats.store import Store
from tether.schemas.builds import BuildsReply, BuildsRequest, DeployRequest
from tether.schemas.events import AgentUpdated, MessageSent
from tether.schemas.plans import TaskSubmit
from tether.schemas.records import TaskRecord
from tether.tasks.known_tools import KnownTools, waiting_note
from tether.tasks.service import TaskService

FIRST_LOOK = 0.5
"""Seconds `submit` waits for the record before it asks whether a dispatcher runs."""
ACCEPT_WAIT = 5.0
"""Seconds `submit` waits for a running dispatcher to record the task (with none running
it returns after `FIRST_LOOK`: the task is recorded when one starts)."""


class Actions(Protocol):
    """The task actions and the operator's deploys; task ids are checked already."""

    async def submit(self, submit: TaskSubmit) -> None: ...
    async def cancel(self, task_id: str) -> TaskRecord: ...
    async def retry(self, task_id: str) -> None: ...
    async def send_input(self, task_id: str, data: Any) -> None: ...
    async def fork(self, task_id: str, from_step: int, input: Any, new_task_id: str) -> None: ...
    async def send_message(self, task_id: str, text: str, message_id: str) -> None: ...
    async def update_agent(self, task_id: str, update_id: str, **changes: Any) -> None: ...
    async def deploy(self, request: DeployRequest) -> BuildsReply: ...


class LocalActions:
    """The actions done here, as a NATS user that may write tasks (the `app` role)."""

    def __init__(self, store: Store, tasks: TaskService, known_tools: KnownTools) -> None:
        self._store = store
        self._tasks = tasks
        self._known_tools = known_tools
        self._queue_submits = False
        """Set once the server refused this user a record write (see `submit`)."""

    async def submit(self, submit: TaskSubmit) -> None:
        """Record the task and hand off its first step here: no dispatcher in between.
        A NATS user that may not write records (the `client` role) submits through the
        queue instead, from then on."""
        if self._queue_submits:
            return await queue(self._store, submit)
        missing = await self._known_tools.unknown(submit.steps)
        names = self._store.names
        try:
            await allowed(
                self._store,
                self._tasks.start(submit, waiting_note(missing), tracing.current()),
                names.kv_subject(names.tasks_bucket),
            )
        except NotAllowedError:
            self._queue_submits = True
            await queue(self._store, submit)

    async def cancel(self, task_id: str) -> TaskRecord:
        return await TaskHandle(self._store, task_id).cancel()

    async def retry(self, task_id: str) -> None:
        await self._tasks.retry(task_id)

    async def send_input(self, task_id: str, data: Any) -> None:
        await TaskHandle(self._store, task_id).send_input(data)

    async def fork(self, task_id: str, from_step: int, input: Any, new_task_id: str) -> None:
        await self._tasks.forks.fork(task_id, from_step, new_task_id, input)

    async def send_message(self, task_id: str, text: str, message_id: str) -> None:
        await self._tasks.steer(task_id, MessageSent, message_id, text=text)

    async def update_agent(self, task_id: str, update_id: str, **changes: Any) -> None:
        await self._tasks.steer(task_id, AgentUpdated, update_id, **changes)

    async def deploy(self, request: DeployRequest) -> BuildsReply:
        """The operator's change, written here: only the operator's NATS user is allowed
        it, and any other is refused at once (NotAllowedError), not after a timeout."""
        store = self._store
        change = BuildsRequest(action=request.action, build=request.build, percent=request.percent)
        subject = store.names.kv_subject(store.names.workers_bucket, store.names.DEPLOYMENT_KEY)
        return await allowed(store, deploys.answer(store, change), subject)


async def queue(store: Store, submit: TaskSubmit) -> None:
    """Submit on `tether.submit.<task_id>`, for the dispatcher to record; wait (briefly)
    until it has, so `get` right after `submit` finds the task. Without a dispatcher the
    task stays queued and is recorded when one starts."""
    await store.records.check_free(submit.task_id)
    if not await store.publish_submit(submit, tracing.current()):
        raise TaskExistsError(submit.task_id)
    handle = TaskHandle(store, submit.task_id)
    with contextlib.suppress(TaskTimeoutError):
        await handle.wait_for(lambda record: True, timeout=FIRST_LOOK)
        return
    if await store.submissions.dispatcher_running():
        with contextlib.suppress(TaskTimeoutError):
            await handle.wait_for(lambda record: True, timeout=ACCEPT_WAIT)
