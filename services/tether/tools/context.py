"""`StepContext`: what a running tool knows about its step, and the effects it may use."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from tether.clock import utcnow
from tether.nats.store import Store
from tether.nats.tokens import TokenWriter
from tether.schemas.codec import encode
from tether.schemas.events import Steering
from tether.schemas.ids import validate_tool_name
from tether.schemas.records import Checkpoint, ParentStep, TaskRecord, Usage
from tether.schemas.workers import Heartbeat, ToolInfo

T = TypeVar("T")


class StepContext:
    """Passed to every tool call as its first argument."""

    def __init__(
        self,
        *,
        store: Store,
        record: TaskRecord,
        step: int,
        attempt: int,
        worker_id: str,
        branch: int | None = None,
    ) -> None:
        self._store = store
        self._record = record
        self.task_id = record.task_id
        self.step = step
        self.branch = branch
        """Which branch of a parallel step this is (None: a step of its own)."""
        self.tool = record.spec(step).branch(branch).tool or ""
        self.attempt = attempt
        self.worker_id = worker_id
        self.progress_fraction: float | None = None
        self.progress_message: str | None = None
        self.usage: Usage | None = None
        """Model tokens this attempt reported; stored with the step's checkpoint."""
        self.notes: list[str] = []
        """What this attempt said about itself (`note`); stored with the step's checkpoint."""
        self._tokens: TokenWriter | None = None

    @property
    def idempotency_key(self) -> str:
        """`<task_id>.<step>` (`.b<branch>` in a parallel step): the same on every
        attempt; pass it to APIs that dedupe."""
        return self._store.names.step_key(self.task_id, self.step, self.branch)

    @property
    def parent(self) -> ParentStep | None:
        """The step of another task that started this one as a child (None: a root)."""
        return self._record.parent

    @property
    def metadata(self) -> dict[str, Any]:
        return self._record.metadata

    @property
    def created_at(self) -> datetime:
        """When the task was created: with its id, what no later task can share (an id is
        free again once `tether gc` removed the task)."""
        return self._record.created_at

    async def output(self, step: int) -> Any:
        """The output of an earlier step of this task."""
        if not 0 <= step < self.step:
            raise ValueError(f"step {step} is not an earlier step of step {self.step}")
        checkpoint = await self._checkpoint(step)
        return None if checkpoint is None else checkpoint.output

    async def outputs(self) -> list[Any]:
        """The outputs of every earlier step, in order."""
        return list(await asyncio.gather(*(self.output(i) for i in range(self.step))))

    async def history(self, since: int = 0) -> list[Checkpoint | None]:
        """The checkpoints of steps `since`.. up to this one (the step each ran, its output
        resolved, its usage), in order: what a tool that rebuilds state from the task's
        past reads. Checkpoints never change, so a caller may keep what it read."""
        return list(await asyncio.gather(*(self._checkpoint(i) for i in range(since, self.step))))

    async def inbox(self, after: int) -> list[tuple[int, Steering]]:
        """What the task was told (messages, new agent settings) after stream sequence
        `after`, in order, with each one's sequence."""
        return await self._store.inbox.after(self.task_id, after)

    async def other_task(self, task_id: str) -> TaskRecord | None:
        """Another task's record, its result resolved; None if there is no such task (an
        agent's follow-up reads the conversation it continues this way)."""
        found = await self._store.records.get(task_id)
        if found is None:
            return None
        result = await self._store.blobs.resolve(found.record.result)
        if result is found.record.result:
            return found.record
        return msgspec.structs.replace(found.record, result=result)

    async def checkpoints_of(self, record: TaskRecord) -> list[Checkpoint | None]:
        """The checkpoints of a task's steps before its current one (before the last, for
        a completed task, whose output is its result), outputs resolved."""
        last = min(record.current_step, record.plan_length - 1)
        read = (self._checkpoint(step, record.task_id) for step in range(last))
        return list(await asyncio.gather(*read))

    async def _checkpoint(self, step: int, task_id: str | None = None) -> Checkpoint | None:
        """A step's checkpoint with its output resolved (a blob reference read)."""
        found = await self._store.checkpoints.get(task_id or self.task_id, step)
        if found is None:
            return None
        output = await self._store.blobs.resolve(found.output)
        return found if output is found.output else msgspec.structs.replace(found, output=output)

    async def tool_info(self, name: str) -> ToolInfo | None:
        """A tool as registered by the workers that serve it (schema, description)."""
        return await self._store.tools.get(name)

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(
            task_id=self.task_id,
            step=self.step,
            branch=self.branch,
            tool=self.tool,
            attempt=self.attempt,
            worker_id=self.worker_id,
            progress=self.progress_fraction,
            message=self.progress_message,
            time=utcnow(),
        )

    async def progress(self, fraction: float | None = None, message: str | None = None) -> None:
        """Report progress (0.0–1.0) and a short message; followers see it at once."""
        if fraction is not None:
            self.progress_fraction = min(1.0, max(0.0, float(fraction)))
        if message is not None:
            self.progress_message = message
        await self._store.heartbeats.put(self.heartbeat())

    def note(self, message: str) -> None:
        """Say something a user should know about this step (a model that could not see
        its tools, ...): kept with its checkpoint, on the task's record and its
        `step_completed` event, so `tether status` and the dashboard show it. Said once:
        the same message again is dropped."""
        if message not in self.notes:
            self.notes.append(message)

    def add_usage(self, usage: Usage) -> None:
        """Count model tokens this step spent: on its event, its checkpoint, the task's total."""
        self.usage = usage if self.usage is None else self.usage + usage

    async def stream(self, delta: str) -> None:
        """Stream a piece of text to anyone following the task (`handle.stream()`,
        `tether watch`): it reaches them at once, before the step completes."""
        if self._tokens is None:
            self._tokens = TokenWriter(
                self._store, self.task_id, self.step, self.attempt, self.branch
            )
        await self._tokens.write(delta)

    async def end_stream(self) -> None:
        """Mark this attempt's streamed text complete; the worker does it when the tool
        returns, before the checkpoint (so a follower never misses the end)."""
        if self._tokens is not None:
            await self._tokens.close()
            self._tokens = None

    def drop_stream(self) -> None:
        """The attempt failed or was stopped: text it had not sent yet is not sent."""
        if self._tokens is not None:
            self._tokens.discard()
            self._tokens = None

    async def memo(
        self, name: str, *, step: int | None = None, task_id: str | None = None
    ) -> bytes | None:
        """The raw memo `name` of this step, of `step` of this task, or of `step` of task
        `task_id`: for a kit that encodes its own results (`once` is the typed form)."""
        return await self._store.checkpoints.get_memo(self._memo_key(name, step, task_id))

    async def keep_memo(self, name: str, raw: bytes, *, step: int | None = None) -> bytes:
        """Keep `raw` as memo `name` of this step (or of `step` of this task) unless one is
        there already (create-only): the bytes that won."""
        return await self._store.checkpoints.create_memo(self._memo_key(name, step, None), raw)

    def _memo_key(self, name: str, step: int | None, task_id: str | None) -> str:
        task_id, step = task_id or self.task_id, self.step if step is None else step
        branch = self.branch if (task_id, step) == (self.task_id, self.step) else None
        return self._store.names.once_key(task_id, step, name, branch)

    @property
    def connection(self) -> Store:
        """The worker's store (its NATS connection and names), for an integration that
        keeps state of its own beside Tether's: LangGraph's saver shares it."""
        return self._store

    async def recall(self, name: str, *, type: type[T]) -> T | None:
        """What `once(name, ...)` stored for this step, or None when it has not run."""
        validate_tool_name(name)
        key = self._store.names.once_key(self.task_id, self.step, name, self.branch)
        stored = await self._store.checkpoints.get_memo(key)
        return None if stored is None else msgspec.json.decode(stored, type=type)

    async def once(
        self, name: str, fn: Callable[[], Awaitable[T] | T], *, type: type[T] | Any = Any
    ) -> T:
        """Run the side effect `fn` (sync or async) at most once for this step, across
        retries and crashes.

        The result is stored (it must be JSON-encodable); a retried step gets the stored
        result back, decoded as `type`, instead of running `fn` again. A crash after `fn`
        ran and before its result was stored runs it again: make it idempotent with
        `idempotency_key` where the other side supports that.
        """
        validate_tool_name(name)
        key = self._store.names.once_key(self.task_id, self.step, name, self.branch)
        stored = await self._store.checkpoints.get_memo(key)
        if stored is None:
            result = fn()
            if inspect.isawaitable(result):
                result = await result
            stored = await self._store.checkpoints.create_memo(key, encode(result))
        decoded: T = msgspec.json.decode(stored, type=type)
        return decoded
