"""`TaskService`: every flow that changes a task, over the store.

Record a completed step, then hand off the next one (the protocol's steps 4 and 5):
the checkpoint and the record move first, then the next step's message is published.
A worker that receives step i+1 therefore always reads a record that has reached it,
and a holder of step i that crashed after recording finds `current_step == i + 1` and
re-publishes the hand-off, which `Nats-Msg-Id` turns into a no-op if it happened. The
checkpoint and the record's compare-and-set are in flight together: a record that moved
past a step whose checkpoint did not land makes the step run again (the worker treats
"no checkpoint" as "not done"), so no output is ever skipped.

The other flows end a task (`endings`: fail, cancel), pause and resume it (`answers`:
wait for input, answer, expire), or resume it (retry); each is one rule of `rules`
applied by compare-and-set.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Protocol

import msgspec

from tether import tracing
from tether.clock import utcnow
from tether.errors import TaskConflictError, TaskExistsError
from tether.nats.recent import Versioned
from tether.nats.store import Store
from tether.schemas.events import AnyStatusEvent, Steering, StepRetrying, Submitted
from tether.schemas.plans import TaskSubmit
from tether.schemas.records import Checkpoint, TaskRecord, TaskStatus
from tether.schemas.work import Timer, WorkMessage
from tether.tasks import events, rules
from tether.tasks.answers import Answers
from tether.tasks.branch_rules import all_branches_done
from tether.tasks.children import ChildTasks
from tether.tasks.dead_letters import DeadLetters
from tether.tasks.endings import Endings, change_or_conflict
from tether.tasks.forks import Forks
from tether.tasks.parallel import ParallelSteps
from tether.tasks.steering import steering_refusal


class Router(Protocol):
    """Which build a hand-off goes to (`tether.deploys.fleet.FleetView`)."""

    def build_for(self, work: WorkMessage, record: TaskRecord | None) -> str | None: ...


class TaskService:
    """The task flows of every role (worker, dispatcher, client, API, gateway).

    Parallel steps (`branches`), child tasks (`children`), a task's history and forks
    (`forks`), its ending (`endings`), its waits for input (`answers`) and the dead
    letters (`dead_letters`) live in modules of their own, over the same store and events.
    """

    def __init__(self, store: Store, router: Router | None = None) -> None:
        self.store = store
        self.router = router
        """A worker's fleet view: hand-offs go to the build that should run them (None:
        every step to its tool's subject, where any worker takes it)."""
        self.branches = ParallelSteps(self)
        self.children = ChildTasks(self)
        self.forks = Forks(self)
        self.endings = Endings(self)
        self.answers = Answers(self)
        self.dead_letters = DeadLetters(store)

    # -- starting a task -----------------------------------------------------------------
    async def start(
        self, submit: TaskSubmit, note: str | None = None, trace: dict[str, str] | None = None
    ) -> TaskRecord:
        """Record a validated submission create-only and hand off its first step, without
        the dispatcher's hop (`Client.submit`, the API's `submit`). Raises
        TaskExistsError when its id names a task, as a duplicate through the dispatcher
        does; when that task is this very submission still waiting to start (its
        submitter may have stopped half-way), it first finishes the hand-off, every part
        of which is idempotent."""
        record = rules.new_record(submit, utcnow(), note=note)
        context = tracing.task_context(trace, submit.task_id)
        if context is not None:
            record = msgspec.structs.replace(record, trace=context)
        created, new = await self.store.records.create_or_find(record)
        if not new:
            if rules.resubmitted(created.record, record):
                await self.hand_off_first(created.record)
            raise TaskExistsError(submit.task_id)
        await self.hand_off_first(created.record)
        return created.record

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
            if not changed:
                # Another attempt completed the task (it emits, or its redelivery does):
                # this one's events would name the attempt whose answer was not kept.
                return None
            return await self._hand_off_after(stored, changed, step, checkpoint, attempt, False)
        stored_checkpoint = asyncio.ensure_future(
            self.store.checkpoints.create(task_id, step, checkpoint)
        )
        try:
            stored, changed = await self._advance(current, step, checkpoint)
        finally:
            winner = await stored_checkpoint
        if winner is not checkpoint and changed:
            # Another run of this step checkpointed first: its output is the step's.
            redone = rules.complete_step(current.record, step, winner, utcnow())
            stored, changed = await self.store.records.update(
                task_id, lambda record: redone if record == stored.record else None, stored
            )
        # The event names the attempt whose output was stored: its streamed text is the step's.
        return await self._hand_off_after(stored, changed, step, winner, winner.attempt, False)

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
        return await self.store.records.update(
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
        said = events.step_completed(
            record, step, checkpoint, utcnow(), attempt=attempt, skipped=skipped
        )
        for event in said:  # in order: `completed` after the step's
            await self.store.publish_event(event)
        if record.status is TaskStatus.COMPLETED:
            await self.children.resume_parent(record)

    async def hand_off_next(self, record: TaskRecord, step: int, checkpoint: Checkpoint) -> None:
        """Publish what follows `step`: now, or when the task wakes from a sleep."""
        wake_at = checkpoint.wake_at
        at = wake_at if wake_at is not None and wake_at > utcnow() else None
        works = rules.next_work(record, step, checkpoint.output)
        if checkpoint.build is not None:
            works = [msgspec.structs.replace(w, from_build=checkpoint.build) for w in works]
        await self.publish(works, at, record)

    async def hand_off_first(self, record: TaskRecord) -> None:
        """Emit `submitted`, set the deadline's timer and publish the first step (all
        idempotent on a replay)."""
        await self.emit(
            Submitted, record, status=TaskStatus.PENDING, time=record.created_at, note=record.note
        )
        if record.deadline_at is not None:
            timer = Timer(task_id=record.task_id, kind="deadline")
            timer_id = self.store.names.deadline_timer(record.task_id)
            await self.store.set_timer(timer_id, timer, record.deadline_at)
        await self.publish(rules.current_work(record), record=record)

    async def publish(
        self,
        works: list[WorkMessage],
        at: datetime | None = None,
        record: TaskRecord | None = None,
    ) -> None:
        """Hand off a step, or every branch of a parallel step at once."""
        names = self.store.names
        router = self.router

        async def publish(work: WorkMessage) -> None:
            msg_id = names.step_msg_id(work.task_id, work.step, work.generation, work.branch)
            # A step that sleeps first is routed when it wakes, by the worker that takes it.
            build = router.build_for(work, record) if router is not None and at is None else None
            await self.store.publish_work(work, msg_id, at, build)

        if len(works) == 1:
            await publish(works[0])
        else:
            await asyncio.gather(*(publish(work) for work in works))

    # -- resuming ---------------------------------------------------------------------------
    async def steer(
        self, task_id: str, kind: type[Steering], msg_id: str, **fields: Any
    ) -> TaskRecord:
        """Tell a running agent something (`MessageSent`, `AgentUpdated`): it reads it
        before its next LLM call, once, in the order told (see `nats.inbox`)."""
        record = (await self.store.records.require(task_id)).record
        if (refused := steering_refusal(record, kind)) is not None:
            raise TaskConflictError(task_id, refused)
        if not await self.runs_an_agent(record):
            raise TaskConflictError(
                task_id, f"task {task_id!r} runs no agent: only an agent reads messages"
            )
        fields.setdefault("status", record.status)
        entry = kind(task_id=task_id, time=utcnow(), generation=record.generation, **fields)
        sent = f"{task_id}.inbox.{msg_id}"  # a caller's id, unique within its task
        await self.store.inbox.put(entry, sent)
        await self.store.publish_event(entry, msg_id=f"{sent}.event")
        return record

    async def runs_an_agent(self, record: TaskRecord) -> bool:
        """Whether a step still to run is an agent's (its tool registered as one)."""
        names = {spec.tool for spec in record.steps[record.current_step - record.done_steps :]}
        infos = await asyncio.gather(*(self.store.tools.get(n) for n in names if n))
        return any(info is not None and info.agent for info in infos)

    async def retry(self, task_id: str) -> TaskRecord:
        """Run a failed task again from the step that failed; earlier checkpoints are reused."""
        record = await change_or_conflict(
            self.store.records,
            task_id,
            lambda record: _unfailed(rules.retry_from_failure(record, utcnow())),
            "{status}: only a task that failed at a step can be retried",
        )
        step = record.current_step
        previous = await self.store.checkpoints.get(task_id, step - 1) if step > 0 else None
        await self.emit(StepRetrying, record, step)
        works = rules.current_work(record, previous.output if previous else None)
        await self.publish(works, record=record)
        if all_branches_done(record, step):  # the group failed at its fan-in
            await self.branches.fan_in(await self.store.records.require(task_id), step)
        return record

    async def emit(
        self, kind: type[AnyStatusEvent], record: TaskRecord, step: int | None = None, **fields: Any
    ) -> None:
        """Publish an event of a task flow (`events.task_event` builds it)."""
        await self.store.publish_event(events.task_event(kind, record, step, **fields))


def _unfailed(record: TaskRecord | None) -> TaskRecord | None:
    """A retried record forgets who failed it, so that a later failure its own write does
    not name (a deadline, a child) is never taken for an attempt's (see `Endings.fail`)."""
    if record is None:
        return None
    return msgspec.structs.replace(record, failed_branch=None, failed_attempt=None)
