"""A task that waits for a person: the wait, its answer, and its expiry (or its deadline's)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import msgspec

from tether.clock import utcnow
from tether.errors import TaskConflictError
from tether.nats.recent import Versioned
from tether.schemas.events import Failed, Waiting
from tether.schemas.records import Checkpoint, InputRequest, TaskRecord, TaskStatus
from tether.schemas.work import Timer
from tether.tasks import rules
from tether.tasks.conformance import check_answer

if TYPE_CHECKING:
    from tether.tasks.service import TaskService


class Answers:
    """`TaskService.answers`: wait for input, take the answer, expire what waited too long."""

    def __init__(self, tasks: TaskService) -> None:
        self.tasks = tasks
        self.store = tasks.store

    async def wait_for_input(
        self, current: Versioned, step: int, request: InputRequest, attempt: int
    ) -> TaskRecord | None:
        stored, changed = await self.store.records.update(
            current.record.task_id,
            lambda record: rules.wait_for_input(record, step, request, utcnow()),
            current,
        )
        if not changed:
            return None
        record = stored.record
        if request.expires_at is not None:
            timer = Timer(
                task_id=record.task_id, kind="input", step=step, generation=record.generation
            )
            timer_id = self.store.names.input_timer(record.task_id, step, record.generation)
            await self.store.set_timer(timer_id, timer, request.expires_at)
        await self.tasks.emit(Waiting, record, step, attempt=attempt, input_request=request)
        return record

    async def expire(self, timer: Timer) -> TaskRecord | None:
        """A timer fired: fail the task if its deadline passed or its input wait expired
        (nothing else has to touch a waiting or sleeping task for that)."""
        found = await self.store.records.get(timer.task_id)
        if found is None:
            return None
        now = utcnow()
        request = found.record.input_request
        if (
            request is not None
            and request.default is not msgspec.UNSET
            and rules.expired(found.record, timer, now) is not None
        ):
            with contextlib.suppress(TaskConflictError):  # answered meanwhile: that stands
                await self._answer(found.record, request.default)  # unanswered: the default
            return None

        def fail_if_expired(record: TaskRecord) -> TaskRecord | None:
            error = rules.expired(record, timer, now)
            step = record.current_step if record.has_step(record.current_step) else None
            return None if error is None else rules.fail(record, step, error, now)

        stored, changed = await self.store.records.update(timer.task_id, fail_if_expired, found)
        record = stored.record
        if changed:
            await self.tasks.emit(Failed, record, record.failed_step, error=record.error)
            await self.store.notify_cancelled(timer.task_id)  # a running step stops at once
        if record.status is TaskStatus.FAILED and record.parent is not None:
            # a child's parent step fails with it: again after a crash here, harmlessly
            await self.tasks.children.resume_parent(record)
        if record.status is TaskStatus.FAILED:  # again after a crash here, harmlessly
            await self.tasks.children.cancel_pending(record)
        return record if changed else None

    async def send_input(self, task_id: str, data: Any) -> TaskRecord:
        """Answer a waiting task: the answer becomes the waiting step's output.

        The answer is stored create-only as the step's checkpoint, then a resume message
        goes to the step's tool; the worker that takes it finds the checkpoint and hands
        off the next step, so the step that asked never runs again.
        """
        found = await self.store.records.require(task_id)
        record = found.record
        if record.status is not TaskStatus.WAITING:
            raise TaskConflictError(
                task_id, f"task {task_id!r} is {record.status.value}, not waiting for input"
            )
        if record.input_request is not None:
            check_answer(task_id, record.input_request, data)
        await self._answer(record, data)
        return record

    async def _answer(self, record: TaskRecord, data: Any) -> None:
        """Store `data` as the waiting step's output (create-only) and resume the task."""
        task_id, step = record.task_id, record.current_step
        answer = Checkpoint(output=data, time=utcnow(), spec=record.spec(step))
        stored = await self.store.checkpoints.create(task_id, step, answer)
        if stored != answer and stored.output != data:
            raise TaskConflictError(task_id, f"task {task_id!r} has already been answered")
        (work,) = rules.current_work(record)
        msg_id = self.store.names.resume_msg_id(task_id, step, record.generation)
        await self.store.publish_work(work, msg_id)
