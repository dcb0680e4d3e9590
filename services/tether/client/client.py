"""`Client`: submit tasks and follow them from Python (the same wire contract as any language)."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from tether.client.actions import LocalActions
from tether.client.handle import TaskHandle
from tether.client.operations import Operations
from tether.client.reads import Reads
from tether.client.remote import RemoteActions
from tether.errors import (
    InvalidTaskError,
    TaskConflictError,
    UnservedToolWarning,
)
from tether.nats.connection import NatsConfig
from tether.nats.layout import Layout
from tether.nats.opening import close_store, open_store
from tether.nats.store import Store
from tether.schemas.codec import encode
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.schemas.records import TaskRecord, TaskStatus
from tether.service import Service
from tether.sessions.session import Session
from tether.tasks import plans
from tether.tasks.known_tools import KnownTools
from tether.tasks.plans import to_step, validate_submit
from tether.tasks.service import TaskService

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.metrics import Metrics

StepLike = StepSpec | dict[str, Any] | str
RECORD_OVERHEAD = 1024


class Client(Reads, Operations, Service):
    """A connection to Tether.

    ```python
    async with Client("nats://localhost:4222") as client:
        handle = await client.submit(["search", "summarize"], metadata={"user": "alice"})
        report = await handle.wait(timeout=600)
    ```
    """

    def __init__(
        self,
        nats: NatsConfig | str | None = None,
        *,
        layout: Layout | None = None,
        provision: bool = True,
        act_through_api: bool = False,
    ) -> None:
        """`provision=False`: do not create Tether's streams and buckets; raise
        NotProvisionedError at connect when they are not there (a wrong prefix, or a
        role that may not create them). `act_through_api=True`: cancel, retry, answer
        and fork by asking the API service (`tether.api.<verb>`), for a NATS user that
        may read tasks but not write them."""
        self.nats = NatsConfig(url=nats) if isinstance(nats, str) else nats or NatsConfig()
        self.layout = layout or Layout.for_config(self.nats)
        self.provision = provision
        self._through_api = act_through_api
        self._store: Store | None = None
        self._known_tools: KnownTools | None = None
        self._tasks: TaskService  # set by connect(), with the store

    @property
    def act_through_api(self) -> bool:
        """Whether actions are asked of the API service (see `__init__`)."""
        return self._through_api

    @act_through_api.setter
    def act_through_api(self, through_api: bool) -> None:
        self._through_api = through_api
        if self._store is not None:
            self._pick_actions(self._store)

    async def connect(self) -> None:
        self._store = await open_store(
            self.nats, self.layout, provision=self.provision, on_lost=self.connection_lost
        )
        self._known_tools = KnownTools(self._store)
        self._tasks = TaskService(self._store)
        self._pick_actions(self._store)

    def _pick_actions(self, store: Store) -> None:
        """Done here, or asked of the API: decided once, not at every action."""
        if self._through_api:
            self._actions = RemoteActions(store)
        else:
            assert self._known_tools is not None
            self._actions = LocalActions(store, self._tasks, self._known_tools)

    async def start(self) -> None:
        await self.connect()

    async def stop(self) -> None:
        await self.close()

    async def close(self) -> None:
        if self._store is not None:
            await close_store(self._store)
        self._store = self._actions = None

    def count_into(self, metrics: Metrics) -> None:
        """Count what this client writes, and its reconnects, into `metrics`."""
        metrics.attach(self._connected())

    async def submit(
        self,
        steps: Sequence[StepLike],
        *,
        task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        deadline: timedelta | None = None,
        strict: bool = False,
    ) -> TaskHandle:
        """Start a task and return its handle at once; the task runs whether or not you wait.

        A tool no worker serves yet does not lose the task: it waits, pending, with a
        note saying so, until a worker for the tool starts. `strict=True` raises
        InvalidTaskError instead, for callers who want a typo to fail at once.
        """
        specs = [await self._by_reference(to_step(step)) for step in steps]
        submit = TaskSubmit(
            task_id=uuid.uuid4().hex if task_id is None else task_id,
            steps=specs,
            metadata=dict(metadata or {}),
            deadline_ms=None if deadline is None else int(deadline.total_seconds() * 1000),
            strict=strict,
        )
        validate_submit(submit)
        self._check_size(submit.task_id, encode(submit))
        assert self._known_tools is not None
        if strict:
            await self._known_tools.check(submit.steps)
        await self._acting().submit(submit)
        unserved = sorted(plans.tools_of(submit.steps) - await self.live_tools())
        if unserved:
            warnings.warn(UnservedToolWarning(submit.task_id, unserved), stacklevel=2)
        return self.handle(submit.task_id)

    async def submit_agent(
        self,
        agent: str | Agent,
        input: str | list[dict[str, Any]],
        *,
        token_budget: int | None = None,
        cost_budget: float | None = None,
        instructions: str | None = None,
        model_settings: dict[str, Any] | None = None,
        task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        deadline: timedelta | None = None,
        strict: bool = False,
    ) -> TaskHandle:
        """Start agent `agent` (see `Agent`; its name, or the agent itself) on `input`:
        a question, or a list of chat messages. `await handle.wait()` is its final answer
        (given the agent, decoded as its `output_type`); `handle.stream()` its text as the
        model writes it. `instructions` and `model_settings` (`temperature`, ...) hold for
        this run only, in place of the agent's (still one system message). `token_budget`
        and `cost_budget` (dollars) hold for this run and every task below it."""
        start: dict[str, Any] = {"input": input}
        if token_budget is not None:
            start["token_budget"] = token_budget
        if cost_budget is not None:
            start["cost_budget"] = cost_budget
        if instructions is not None:
            start["instructions"] = instructions
        if model_settings:
            start["settings"] = model_settings
        return await self._ask(
            agent, start, task_id=task_id, metadata=metadata, deadline=deadline, strict=strict
        )

    async def _ask(self, agent: str | Agent, start: dict[str, Any], **options: Any) -> TaskHandle:
        """Submit an agent's first turn; the handle decodes an `output_type`'s answer."""
        name = agent if isinstance(agent, str) else agent.name
        handle = await self.submit([StepSpec(tool=name, input=start)], **options)
        if not isinstance(agent, str) and agent.output is not None:
            handle.result_type = agent.output.type
        return handle

    async def continue_agent(
        self,
        task_id: str,
        input: str | list[dict[str, Any]],
        *,
        agent: str | Agent | None = None,
        token_budget: int | None = None,
        new_task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        deadline: timedelta | None = None,
    ) -> TaskHandle:
        """Ask the finished agent task `task_id` a follow-up: a new task whose conversation
        starts with that one's, by reference (nothing of it is copied, so a turn costs the
        same however long the thread). `agent`: the agent that answers (default: the one
        that answered `task_id`)."""
        record = await self.get(task_id)
        if record.status is not TaskStatus.COMPLETED:
            raise TaskConflictError(
                task_id,
                f"task {task_id!r} is {record.status.value}: only a completed conversation "
                "can be continued (wait for its answer, or send_message to steer it)",
            )
        agent = agent or record.steps[-1].tool
        if not agent:
            raise InvalidTaskError(f"task {task_id!r} did not end with an agent's turn")
        start: dict[str, Any] = {"input": input, "after": task_id}
        if token_budget is not None:
            start["token_budget"] = token_budget
        return await self._ask(
            agent, start, task_id=new_task_id, metadata=metadata, deadline=deadline
        )

    def session(self, session_id: str, *, agent: str | Agent | None = None) -> Session:
        """The conversation `session_id` (your app's own id for it: a chat's id) with
        `agent`, across as many runs as it takes (see `Session`). `agent` may be left
        out for a session that exists."""
        name = agent if agent is None or isinstance(agent, str) else agent.name
        return Session(self._connected(), session_id, name, self.handle)

    async def _by_reference(self, spec: StepSpec) -> StepSpec:
        """The step with a large input stored once as a blob; the tool gets the value."""
        if spec.parallel is not None:
            branches = [await self._by_reference(branch) for branch in spec.parallel]
            return msgspec.structs.replace(spec, parallel=branches)
        data = encode(spec.input)
        if spec.input is None or len(data) <= self._connected().blobs.threshold:
            return spec
        ref = msgspec.Raw(await self._connected().blobs.by_reference(data))
        replaced: StepSpec = msgspec.structs.replace(spec, input=ref)
        return replaced

    async def resolve(self, value: Any) -> Any:
        """A value with its blob references (`{"$blob": ...}`) replaced by what they name."""
        return await self._connected().blobs.resolve(value)

    @property
    def max_payload(self) -> int:
        """The largest message the NATS server accepts (its max_payload)."""
        return self._connected().max_payload

    def _check_size(self, task_id: str, data: bytes) -> None:
        # The record the dispatcher makes of it is a little larger than the submission.
        limit = self._connected().max_value - RECORD_OVERHEAD
        if len(data) > limit:
            raise InvalidTaskError(
                f"task {task_id!r} is {len(data):,} bytes; at most {limit:,} fit (the NATS "
                "server's max_payload, less room for the record and replies): pass large "
                "inputs by reference (a URL or object name)"
            )

    async def cancel(self, task_id: str) -> TaskRecord:
        """Cancel an unfinished task; raises TaskConflictError if it already ended."""
        return await self._acting().cancel(self.handle(task_id).task_id)

    async def retry(self, task_id: str) -> TaskHandle:
        """Run a failed task again from its failed step (completed steps are not re-run)."""
        handle = self.handle(task_id)
        await self._acting().retry(handle.task_id)
        return handle

    async def fork(
        self,
        task_id: str,
        from_step: int,
        *,
        input: Any = None,
        new_task_id: str | None = None,
    ) -> TaskHandle:
        """A new task that reuses `task_id`'s outputs before `from_step` and runs from
        there, optionally with a new `input` for that step ("what if the prompt had been
        different"). The original task is not touched."""
        new_id = uuid.uuid4().hex if new_task_id is None else new_task_id
        handle = self.handle(new_id)
        original = self.handle(task_id).task_id
        await self._acting().fork(original, from_step, input, new_id)
        return handle

    async def send_input(self, task_id: str, data: Any) -> None:
        """Answer a task that is waiting for input; it resumes at its next step."""
        await self._acting().send_input(self.handle(task_id).task_id, data)

    async def send_message(self, task_id: str, text: str, *, message_id: str | None = None) -> None:
        """Tell a running agent task something: it reads `text` as a user message before
        its next LLM call, exactly once, in the order sent (recorded as a `message_sent`
        event). `message_id` makes a repeat of the same send a no-op. A message sent as
        the agent gives its final answer may come too late: it then reads nothing more."""
        task_id = self.handle(task_id).task_id
        message_id = message_id or uuid.uuid4().hex
        await self._acting().send_message(task_id, text, message_id)

    async def runs_an_agent(self, record: TaskRecord) -> bool:
        """Whether a step still to run is an agent's: a task `send_message` can reach."""
        return not record.status.is_terminal and await self._tasks.runs_an_agent(record)

    async def update_agent(
        self,
        task_id: str,
        *,
        model: str | None = None,
        instructions: str | None = None,
        token_budget: int | None = None,
        update_id: str | None = None,
    ) -> None:
        """Change a running agent task's model (a name on the same endpoint), instructions
        or token budget, from its next LLM call on (an `agent_updated` event)."""
        if model is None and instructions is None and token_budget is None:
            raise InvalidTaskError("update_agent: give model, instructions or token_budget")
        if token_budget is not None and token_budget < 1:
            raise InvalidTaskError(f"token_budget must be at least 1, not {token_budget}")
        task_id = self.handle(task_id).task_id
        update_id = update_id or uuid.uuid4().hex
        changes = {"model": model, "instructions": instructions, "token_budget": token_budget}
        await self._acting().update_agent(task_id, update_id, **changes)
