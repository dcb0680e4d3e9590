"""`TaskService`: every flow that changes a task, over the store.

Record a completed step, then hand off the next one (the protocol's steps 4 and 5):
the checkpoint and the record move first, then the next step's message is published.
A worker that receives step i+1 therefore always reads a record that has reached it,
and a holder of step i that crashed after recording finds `current_step == i + 1` and
re-publishes the hand-off, which `Nats-Msg-Id` turns into a no-op if it happened. The
checkpoint and the record's compare-and-set are in flight together: a record that moved
past a step whose checkpoint did not land makes the step run again (the worker treats
"no checkpoint" as "not done"), so no output is ever skipped.

The other flows end or pause a task (fail, cancel, wait for input) or resume it
(answer, retry); each is one rule of `rules` applied by compare-and-set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from tether.errors import (
    MessageTooLargeError,
    TaskConflictError,
    TaskExistsError,
    TaskNotFoundError,
)
from tether.nats.recent import Versioned
from tether.nats.store import Store
from tether.schemas.codec import encode
from tether.schemas.events import (
    AnyStatusEvent,
    Cancelled,
    Completed,
    Failed,
    StepCompleted,
    StepRetrying,
    Submitted,
    Waiting,
)
from tether.schemas.tasks import (
    Checkpoint,
    DeadLetter,
    ErrorInfo,
    InputRequest,
    ParentStep,
    StepSpec,
    TaskRecord,
    TaskStatus,
    Timer,
    WorkMessage,
)
from tether.tasks import rules
from tether.tasks.conformance import check_answer
from tether.tasks.rules import utcnow

EVENT_OUTPUT_LIMIT = 4096
DEAD_LETTER_DATA_LIMIT = 64 * 1024
Change = Callable[[TaskRecord], TaskRecord | None]


def event_output(output: Any) -> Any:
    """Outputs ride on events only when small; followers read big ones from the record."""
    size = len(output) if isinstance(output, msgspec.Raw) else len(encode(output))
    return output if size <= EVENT_OUTPUT_LIMIT else None


@dataclass
class _GroupWrites:
    """This process's writes to one parallel step's record: one at a time, from the last."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    latest: Versioned | None = None
    users: int = 0


class TaskService:
    """The task flows of every role (worker, dispatcher, client, API, gateway)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._groups: dict[tuple[str, int, int], _GroupWrites] = {}

    # -- steps: record, complete, hand off -------------------------------------------------
    async def record_step(
        self, current: Versioned, step: int, checkpoint: Checkpoint, *, attempt: int
    ) -> TaskRecord | None:
        """Checkpoint a step that just ran and complete it (see `complete_step`).

        The last step of a plan is not checkpointed: the record's compare-and-set that
        completes the task stores its output as `result`, which stands in for it.
        """
        task_id = current.record.task_id
        checkpoint = msgspec.structs.replace(checkpoint, spec=current.record.spec(step))
        if step + 1 == current.record.plan_length and not checkpoint.next_steps:
            stored, changed = await self._advance(current, step, checkpoint)
            if not changed and stored.record.status is TaskStatus.COMPLETED:
                checkpoint = msgspec.structs.replace(checkpoint, output=stored.record.result)
            return await self._hand_off_after(stored, changed, step, checkpoint, attempt, False)
        stored_checkpoint = asyncio.ensure_future(
            self.store.create_checkpoint(task_id, step, checkpoint)
        )
        try:
            stored, changed = await self._advance(current, step, checkpoint)
        finally:
            winner = await stored_checkpoint
        if winner is not checkpoint and changed:
            # Another run of this step checkpointed first: its output is the step's.
            redone = rules.complete_step(current.record, step, winner, utcnow())
            stored, changed = await self.store.update_record(
                task_id, lambda record: redone if record == stored.record else None, stored
            )
        return await self._hand_off_after(stored, changed, step, winner, attempt, False)

    async def complete_step(
        self,
        current: Versioned,
        step: int,
        checkpoint: Checkpoint,
        *,
        attempt: int | None = None,
        skipped: bool = False,
    ) -> TaskRecord | None:
        """Record `step` as done and hand off what follows; None if the task moved on."""
        stored, changed = await self._advance(current, step, checkpoint)
        return await self._hand_off_after(stored, changed, step, checkpoint, attempt, skipped)

    async def replay_hand_off(self, record: TaskRecord, step: int, checkpoint: Checkpoint) -> None:
        """The record moved past `step` but its holder may have died before handing off."""
        await self.emit_step_completed(record, step, checkpoint)
        await self.hand_off_next(record, step, checkpoint)

    async def _advance(
        self, current: Versioned, step: int, checkpoint: Checkpoint
    ) -> tuple[Versioned, bool]:
        return await self.store.update_record(
            current.record.task_id,
            lambda record: rules.complete_step(record, step, checkpoint, utcnow()),
            current,
        )

    async def _hand_off_after(
        self,
        stored: Versioned,
        changed: bool,
        step: int,
        checkpoint: Checkpoint,
        attempt: int | None,
        skipped: bool,
    ) -> TaskRecord | None:
        record = stored.record
        if not changed and record.current_step != step + 1:
            return None  # cancelled or failed meanwhile, or a stale duplicate
        # The record has moved. Progress events do not wait for a PubAck, so emitting
        # first costs the hand-off nothing (and saves gathering them as tasks).
        await self.emit_step_completed(record, step, checkpoint, attempt=attempt, skipped=skipped)
        await self.hand_off_next(record, step, checkpoint)
        return record

    async def emit_step_completed(
        self,
        record: TaskRecord,
        step: int,
        checkpoint: Checkpoint,
        *,
        attempt: int | None = None,
        skipped: bool = False,
    ) -> None:
        now = utcnow()
        output = event_output(checkpoint.output)
        await self._emit(
            StepCompleted,
            record,
            step,
            attempt=attempt,
            time=now,
            output=output,
            skipped=skipped,
            wake_at=record.wake_at,
        )
        if record.status is TaskStatus.COMPLETED:
            await self._emit(Completed, record, time=now, output=event_output(record.result))
            await self.resume_parent(record)

    async def hand_off_next(self, record: TaskRecord, step: int, checkpoint: Checkpoint) -> None:
        """Publish what follows `step`: now, or when the task wakes from a sleep."""
        wake_at = checkpoint.wake_at
        at = wake_at if wake_at is not None and wake_at > utcnow() else None
        await self._publish(rules.next_work(record, step, checkpoint.output), at)

    async def hand_off_first(self, record: TaskRecord) -> None:
        """Emit `submitted`, set the deadline's timer and publish the first step (all
        idempotent on a replay)."""
        await self._emit(Submitted, record, status=TaskStatus.PENDING, time=record.created_at)
        if record.deadline_at is not None:
            timer = Timer(task_id=record.task_id, kind="deadline")
            subject = self.store.names.deadline_timer(record.task_id)
            await self.store.set_timer(subject, timer, record.deadline_at)
        await self._publish(rules.current_work(record))

    async def _publish(self, works: list[WorkMessage], at: datetime | None = None) -> None:
        """Hand off a step, or every branch of a parallel step at once."""
        names = self.store.names

        async def publish(work: WorkMessage) -> None:
            msg_id = names.step_msg_id(work.task_id, work.step, work.generation, work.branch)
            await self.store.publish_work(work, msg_id, at)

        if len(works) == 1:
            await publish(works[0])
        else:
            await asyncio.gather(*(publish(work) for work in works))

    # -- parallel steps: count branches, fan in ----------------------------------------
    async def record_branch(
        self, current: Versioned, step: int, branch: int, checkpoint: Checkpoint, *, attempt: int
    ) -> TaskRecord | None:
        """Checkpoint one branch of a parallel step, count it, and fan in if it was the
        last. The checkpoint is create-only: when two holders of a branch race, the
        first output stored is the branch's, and both count that one."""
        task_id = current.record.task_id
        spec = current.record.spec(step).branch(branch)
        checkpoint = msgspec.structs.replace(checkpoint, spec=spec)
        winner = await self.store.create_checkpoint(task_id, step, checkpoint, branch)
        return await self.count_branch(current, step, branch, winner, attempt=attempt)

    async def count_branch(
        self,
        current: Versioned,
        step: int,
        branch: int,
        checkpoint: Checkpoint,
        *,
        attempt: int | None = None,
        skipped: bool = False,
    ) -> TaskRecord | None:
        """Add a checkpointed branch to the record's `done_branches`; the holder whose
        write completes the set (or any later holder of a branch, after a crash) fans in.

        Branches that finish together in one process take turns, each starting from the
        record the one before wrote: a hundred compare-and-sets on one key would
        otherwise conflict with each other and retry about n²/2 times.
        """
        record = current.record
        key = (record.task_id, step, record.generation)
        group = self._groups.setdefault(key, _GroupWrites())
        group.users += 1
        try:
            async with group.lock:
                latest = group.latest
                start = latest if latest and latest.revision > current.revision else current
                stored, changed = await self.store.update_record(
                    record.task_id,
                    lambda record: rules.complete_branch(record, step, branch, utcnow()),
                    start,
                )
                group.latest = stored
        finally:
            group.users -= 1
            if not group.users:
                del self._groups[key]
        if changed:
            output = event_output(checkpoint.output)
            await self._emit(
                StepCompleted,
                stored.record,
                step,
                branch=branch,
                attempt=attempt,
                output=output,
                skipped=skipped,
            )
        if rules.all_branches_done(stored.record, step):
            return await self._fan_in(stored, step)
        return stored.record if changed else None

    async def _fan_in(self, stored: Versioned, step: int) -> TaskRecord | None:
        """Store the group's checkpoint (its branches' outputs as a list), then complete
        the step as any other: record, then hand off, exactly once by compare-and-set."""
        record = stored.record
        count = len(record.spec(step).parallel or ())
        branches = await asyncio.gather(
            *(self.store.get_checkpoint(record.task_id, step, b) for b in range(count))
        )
        if any(branch is None for branch in branches):  # counted only once checkpointed
            raise RuntimeError(
                f"task {record.task_id!r}, step {step}: a branch checkpoint is missing"
            )
        group = rules.fan_in([b for b in branches if b is not None], record.spec(step), utcnow())
        try:
            winner = await self.store.create_checkpoint(record.task_id, step, group)
        except MessageTooLargeError as exc:
            message = f"the outputs of step {step}'s branches do not fit together: {exc}"
            error = ErrorInfo(type="OutputTooLarge", message=message)
            await self.fail(record.task_id, error, step=step, current=stored)
            return None
        return await self.complete_step(stored, step, winner)

    async def replay_fan_in(self, record: TaskRecord, step: int) -> None:
        """A branch's message after its group completed: replay the hand-off (its holder
        may have died after the record moved and before the next step was published)."""
        group = await self.store.get_checkpoint(record.task_id, step)
        if group is None and record.status is TaskStatus.COMPLETED:
            group = Checkpoint(output=record.result, time=record.updated_at)
        if group is not None:
            await self.replay_hand_off(record, step, group)

    async def plan(self, record: TaskRecord) -> list[StepSpec]:
        """The whole plan: the steps the record let go of, from their checkpoints, then
        the record's own."""
        finished = await asyncio.gather(
            *(self.store.get_checkpoint(record.task_id, step) for step in range(record.done_steps))
        )
        history = [found.spec if found and found.spec else StepSpec(tool="?") for found in finished]
        return history + record.steps

    async def fork(
        self, task_id: str, from_step: int, new_task_id: str, new_input: Any = None
    ) -> TaskRecord:
        """Start `new_task_id` as a copy of `task_id` that runs again from `from_step`:
        the checkpoints before it are copied (those steps do not run), the rest runs."""
        source = (await self.store.require_record(task_id)).record
        plan = await self.plan(source)
        history = await asyncio.gather(
            *(self.store.get_checkpoint(task_id, step) for step in range(len(plan)))
        )
        added = {
            step: len(found.next_steps)
            for step, found in enumerate(history)
            if step >= from_step and found is not None and found.next_steps
        }
        plan = rules.plan_before(plan, added)  # the re-run steps will add their own
        record = rules.forked(source, plan, from_step, new_task_id, utcnow(), new_input)
        if await self.store.get_record(new_task_id) is not None:
            raise TaskExistsError(new_task_id)
        earlier = history[:from_step]
        if any(checkpoint is None for checkpoint in earlier):
            raise TaskConflictError(
                task_id, f"task {task_id!r} lacks a checkpoint before step {from_step}"
            )
        await asyncio.gather(
            *(
                self.store.create_checkpoint(new_task_id, step, checkpoint)
                for step, checkpoint in enumerate(earlier)
                if checkpoint is not None
            )
        )
        if await self.store.create_record(record) is None:
            raise TaskExistsError(new_task_id)
        previous = earlier[-1].output if earlier and earlier[-1] else None
        await self._emit(Submitted, record)
        await self._publish(rules.current_work(record, previous))
        return record

    # -- ending and pausing ---------------------------------------------------------------
    async def fail(
        self,
        task_id: str,
        error: ErrorInfo,
        *,
        step: int | None = None,
        branch: int | None = None,
        attempt: int | None = None,
        current: Versioned | None = None,
    ) -> TaskRecord:
        """Mark the task failed (unless it already ended) and emit `failed`; a failed
        branch also stops its running siblings (the notice a cancel sends)."""
        stored, changed = await self.store.update_record(
            task_id, lambda record: rules.fail(record, step, error, utcnow()), current
        )
        record = stored.record
        if changed:
            await self._emit(Failed, record, step, branch=branch, attempt=attempt, error=error)
            if branch is not None:
                await self.store.notify_cancelled(task_id)
            await self.resume_parent(record)
        return record

    async def dead_letter(
        self,
        *,
        tool: str,
        subject: str,
        data: bytes,
        error: ErrorInfo,
        task_id: str | None = None,
        step: int | None = None,
        branch: int | None = None,
        attempt: int = 0,
    ) -> None:
        """Keep what Tether gave up on (the first 64 KiB of it) on `<prefix>.dead.<tool>`."""
        await self.store.dead_letter(
            DeadLetter(
                tool=tool,
                task_id=task_id,
                step=step,
                branch=branch,
                attempt=attempt,
                error=error,
                subject=subject,
                data=data[:DEAD_LETTER_DATA_LIMIT],
                size=len(data),
                time=utcnow(),
            )
        )

    async def cancel(self, task_id: str) -> TaskRecord:
        """Cancel a task that has not ended; workers running one of its steps stop it at
        once (on the notice), or within one heartbeat if they missed the notice."""
        record = await self._change_or_conflict(
            task_id,
            lambda record: rules.cancel(record, utcnow()),
            "already {status}: only unfinished tasks can be cancelled",
        )
        await self.store.notify_cancelled(task_id)
        await self._emit(Cancelled, record)
        await asyncio.gather(*(self._cancel_child(child) for child in record.children))
        await self.resume_parent(record)
        return record

    async def _cancel_child(self, task_id: str) -> None:
        with contextlib.suppress(TaskConflictError, TaskNotFoundError):  # it ended already
            await self.cancel(task_id)

    # -- child tasks ----------------------------------------------------------------------
    async def start_child(
        self,
        current: Versioned,
        step: int,
        steps: list[StepSpec],
        *,
        task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TaskRecord | None:
        """Start a child task that runs `steps`; its result will complete `step`.

        The child is created first, then the parent's record names it (`awaiting`): a
        crash in between re-runs the step, which finds the same child (its id comes from
        the step) and goes on. A child that already ended resumes the parent at once.
        """
        parent = current.record
        child_id = task_id or rules.child_id(parent.task_id, step, parent.generation)
        child = rules.new_child(parent, step, child_id, steps, metadata or {}, utcnow())
        created = await self.store.create_record(child)
        if created is not None:
            await self.hand_off_first(child)
        else:
            existing = (await self.store.require_record(child_id)).record
            if existing.parent != child.parent:
                raise TaskExistsError(child_id)
            child = existing
            if child.status is TaskStatus.PENDING and child.current_step == 0:
                await self.hand_off_first(child)
        stored, _ = await self.store.update_record(
            parent.task_id,
            lambda record: rules.await_child(record, step, child_id, utcnow()),
            current,
        )
        if child.status.is_terminal:
            await self.resume_parent(child)
        return stored.record

    async def resume_parent(self, child: TaskRecord) -> None:
        """A child task ended: complete its parent's step with the result (as an answer
        does: checkpoint create-only, then a resume message), or fail the step. Safe to
        repeat: whoever ends a child, or replays its end, calls it."""
        link = child.parent
        if link is None or not child.status.is_terminal:
            return
        found = await self.store.get_record(link.task_id)
        if found is None or not rules.awaits(found.record, link):
            return
        failure = rules.child_failure(child)
        if failure is not None:
            await self._fail_step_if_waiting(link, failure)
            return
        parent = found.record
        done = Checkpoint(output=child.result, time=utcnow(), spec=parent.spec(link.step))
        await self.store.create_checkpoint(parent.task_id, link.step, done)
        (work,) = rules.current_work(parent)
        msg_id = self.store.names.resume_msg_id(parent.task_id, link.step, parent.generation)
        await self.store.publish_work(work, msg_id)

    async def _fail_step_if_waiting(self, link: ParentStep, error: ErrorInfo) -> None:
        now = utcnow()

        def fail(record: TaskRecord) -> TaskRecord | None:
            waiting = rules.awaits(record, link)
            return rules.fail(record, link.step, error, now) if waiting else None

        stored, changed = await self.store.update_record(link.task_id, fail)
        if changed:
            await self._emit(Failed, stored.record, link.step, error=error)
            await self.resume_parent(stored.record)

    async def wait_for_input(
        self, current: Versioned, step: int, request: InputRequest, attempt: int
    ) -> TaskRecord | None:
        stored, changed = await self.store.update_record(
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
            subject = self.store.names.input_timer(record.task_id, step, record.generation)
            await self.store.set_timer(subject, timer, request.expires_at)
        await self._emit(Waiting, record, step, attempt=attempt, input_request=request)
        return record

    async def expire(self, timer: Timer) -> TaskRecord | None:
        """A timer fired: fail the task if its deadline passed or its input wait expired
        (nothing else has to touch a waiting or sleeping task for that)."""
        found = await self.store.get_record(timer.task_id)
        if found is None:
            return None
        now = utcnow()

        def fail_if_expired(record: TaskRecord) -> TaskRecord | None:
            error = rules.expired(record, timer, now)
            step = record.current_step if record.has_step(record.current_step) else None
            return None if error is None else rules.fail(record, step, error, now)

        stored, changed = await self.store.update_record(timer.task_id, fail_if_expired, found)
        if not changed:
            return None
        record = stored.record
        await self._emit(Failed, record, record.failed_step, error=record.error)
        await self.store.notify_cancelled(timer.task_id)  # a running step stops at once
        return record

    # -- resuming ---------------------------------------------------------------------------
    async def send_input(self, task_id: str, data: Any) -> TaskRecord:
        """Answer a waiting task: the answer becomes the waiting step's output.

        The answer is stored create-only as the step's checkpoint, then a resume message
        goes to the step's tool; the worker that takes it finds the checkpoint and hands
        off the next step, so the step that asked never runs again.
        """
        found = await self.store.require_record(task_id)
        record = found.record
        if record.status is not TaskStatus.WAITING:
            raise TaskConflictError(
                task_id, f"task {task_id!r} is {record.status.value}, not waiting for input"
            )
        if record.input_request is not None:
            check_answer(task_id, record.input_request, data)
        step = record.current_step
        answer = Checkpoint(output=data, time=utcnow(), spec=record.spec(step))
        stored = await self.store.create_checkpoint(task_id, step, answer)
        if stored != answer and stored.output != data:
            raise TaskConflictError(task_id, f"task {task_id!r} has already been answered")
        (work,) = rules.current_work(record)
        msg_id = self.store.names.resume_msg_id(task_id, step, record.generation)
        await self.store.publish_work(work, msg_id)
        return record

    async def retry(self, task_id: str) -> TaskRecord:
        """Run a failed task again from the step that failed; earlier checkpoints are reused."""
        record = await self._change_or_conflict(
            task_id,
            lambda record: rules.retry_from_failure(record, utcnow()),
            "{status}: only a task that failed at a step can be retried",
        )
        step = record.current_step
        previous = await self.store.get_checkpoint(task_id, step - 1) if step > 0 else None
        await self._emit(StepRetrying, record, step)
        await self._publish(rules.current_work(record, previous.output if previous else None))
        if rules.all_branches_done(record, step):  # the group failed at its fan-in
            await self._fan_in(await self.store.require_record(task_id), step)
        return record

    async def _emit(
        self, kind: type[AnyStatusEvent], record: TaskRecord, step: int | None = None, **fields: Any
    ) -> None:
        """Every event of a task flow is built here: the record's status and time, the
        step's tool, unless `fields` say otherwise."""
        fields.setdefault("status", record.status)
        fields.setdefault("time", record.updated_at)
        branch = fields.get("branch")
        in_plan = step is not None and record.has_step(step)
        tool = record.spec(step).branch(branch).tool if in_plan and step is not None else None
        event = kind(task_id=record.task_id, step=step, tool=tool, **fields)
        await self.store.emit(event, record.generation)

    async def _change_or_conflict(self, task_id: str, change: Change, refusal: str) -> TaskRecord:
        """Apply `change`, or raise TaskConflictError saying why the task refuses it."""
        stored, changed = await self.store.update_record(task_id, change)
        record = stored.record
        if not changed:
            reason = refusal.format(status=record.status.value)
            raise TaskConflictError(task_id, f"task {task_id!r} is {reason}")
        return record
