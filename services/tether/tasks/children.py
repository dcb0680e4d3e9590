"""Child tasks: a step that completes with the result of a task it started."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from tether.clock import utcnow
from tether.errors import InvalidTaskError, TaskExistsError, TaskNotFoundError
from tether.nats.recent import Versioned
from tether.schemas.events import Cancelled, Failed, Submitted
from tether.schemas.ids import validate_task_id
from tether.schemas.plans import StepSpec
from tether.schemas.records import (
    Checkpoint,
    ErrorInfo,
    InputRequest,
    ParentStep,
    TaskRecord,
    TaskStatus,
)
from tether.tasks import branch_rules, child_rules, rules
from tether.tasks.known_tools import KnownTools
from tether.tasks.plans import validate_steps

if TYPE_CHECKING:
    from tether.tasks.service import TaskService


class ChildTasks:
    """`TaskService.children`: start a child, resume its parent when it ends."""

    def __init__(self, tasks: TaskService) -> None:
        self.tasks = tasks
        self.store = tasks.store

    async def start(
        self,
        current: Versioned,
        step: int,
        steps: list[StepSpec],
        *,
        task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        branch: int | None = None,
        build: str | None = None,
    ) -> TaskRecord | None:
        """Start a child task that runs `steps`; its result will complete `step` (or one
        `branch` of it, a parallel step: an agent's call of a sub-agent), from a step
        run by `build`.

        Raises InvalidTaskError (or InvalidNameError) for a plan that cannot run. The
        parent lists the child (`starting`) before the child's record exists, so that
        whoever ends the parent reaches every child its steps created; the child is
        created and handed off, then the parent names it (`children`, `awaiting`). A crash anywhere
        in between re-runs the step, which finds the same child (its id comes from the
        step) and goes on, or gives the step up, which cancels the child if it is still
        `pending`. A child that already ended resumes the parent at once. None: the
        parent ended or moved on while the step ran, and no child is started.
        """
        if not steps:
            raise InvalidTaskError("a child task has no steps: give Child(...) at least one")
        validate_steps(steps, "child task")
        if task_id is not None:
            validate_task_id(task_id)
        await KnownTools(self.store).check(steps)
        parent = current.record
        child_id = task_id or child_rules.child_id(parent.task_id, step, parent.generation, branch)
        child = child_rules.new_child(
            parent, step, child_id, steps, metadata or {}, utcnow(), branch, build
        )
        link = child.parent
        assert link is not None
        listed = await self._list_first(current, link, child_id)
        if listed is None:
            return None
        created = await self.store.records.create(child)
        if created is not None:
            await self.tasks.hand_off_first(child)
        else:
            existing = (await self.store.records.require(child_id)).record
            if existing.parent != child.parent:
                raise TaskExistsError(child_id)
            child = existing
            if child.status is TaskStatus.PENDING and child.current_step == 0:
                await self.tasks.hand_off_first(child)

        # A step waits for its child by name; a branch's child is only listed (the other
        # branches run on, and the child's end resumes the branch by its checkpoint).
        def linked(record: TaskRecord) -> TaskRecord | None:
            if branch is not None:
                return child_rules.list_child(record, child_id, utcnow())
            return child_rules.await_child(record, step, child_id, utcnow(), build)

        stored, _ = await self.store.records.update(parent.task_id, linked, listed)
        if child.status.is_terminal:
            await self.resume_parent(child)
        elif not child_rules.awaits(stored.record, link):
            # The parent ended (or was retried) since the listing: its cancel or failure
            # may have looked for the child before its record existed, so apply it here.
            pending_only = stored.record.status is not TaskStatus.CANCELLED
            await self._cancel(parent.task_id, child_id, pending_only)
        return stored.record

    async def _list_first(
        self, current: Versioned, link: ParentStep, child_id: str
    ) -> Versioned | None:
        """The parent as stored once it lists `child_id` (**list child**) as `starting`,
        before the child's record is created; None if it no longer runs the step."""

        def listed(record: TaskRecord) -> TaskRecord | None:
            if not child_rules.awaits(record, link):
                return None
            return child_rules.list_starting(record, child_id, utcnow())

        stored, _ = await self.store.records.update(link.task_id, listed, current)
        return stored if child_rules.awaits(stored.record, link) else None

    async def ask(
        self, current: Versioned, step: int, branch: int, request: InputRequest, attempt: int
    ) -> None:
        """A branch asked a person (`NeedsInput`): a child task of the branch's one step
        waits for the answer, which then completes the child, and so the branch (its tool
        does not run again). The other branches run on meanwhile."""
        parent = current.record
        spec = parent.spec(step).branch(branch)
        child_id = child_rules.child_id(parent.task_id, step, parent.generation, branch)
        child = child_rules.new_child(parent, step, child_id, [spec], {}, utcnow(), branch)
        assert child.parent is not None
        if await self._list_first(current, child.parent, child_id) is None:
            return
        found = await self.store.records.create(child)
        if found is None:  # an earlier attempt asked already
            found = await self.store.records.require(child_id)
            if found.record.parent != child.parent:
                raise TaskExistsError(child_id)
        else:
            await self.tasks.emit(Submitted, child)
        await self.store.records.update(
            parent.task_id, lambda record: child_rules.list_child(record, child_id, utcnow())
        )
        if found.record.status is TaskStatus.PENDING:
            await self.tasks.answers.wait_for_input(found, 0, request, attempt)

    async def resume_parent(self, child: TaskRecord) -> None:
        """A child task ended: complete its parent's step with the result (as an answer
        does: checkpoint create-only, then a resume message), or fail the step. Safe to
        repeat: whoever ends a child, or replays its end, calls it."""
        link = child.parent
        if link is None or not child.status.is_terminal:
            return
        found = await self.store.records.get(link.task_id)
        if found is None or not child_rules.awaits(found.record, link):
            return
        found, _ = await self.store.records.update(
            link.task_id,
            lambda record: child_rules.list_child(record, child.task_id, utcnow()),
            found,
        )
        failure = child_rules.child_failure(child)
        parent = found.record
        if link.branch is not None:
            await self._resume_branch(found, link, child, failure)
            return
        if failure is not None:
            await self._fail_step_if_waiting(link, failure)
            return
        spec = parent.spec(link.step)
        done = Checkpoint(output=child.result, time=utcnow(), spec=spec, usage=child.usage)
        await self.store.checkpoints.create(parent.task_id, link.step, done)
        (work,) = rules.current_work(parent)
        msg_id = self.store.names.resume_msg_id(parent.task_id, link.step, parent.generation)
        await self.store.publish_work(work, msg_id)

    async def _resume_branch(
        self, found: Versioned, link: ParentStep, child: TaskRecord, failure: ErrorInfo | None
    ) -> None:
        """A branch's child ended: its result (or, in a group that collects its branches'
        errors, its failure) is the branch's checkpoint, counted at once as a branch that
        ran is; in another group its failure fails the step. A crash in between is
        mended by the replay of the child's end, which comes here again."""
        assert link.branch is not None
        parent = found.record
        group = parent.spec(link.step)
        if failure is not None and not group.collect_errors:
            await self._fail_step_if_waiting(link, failure)
            return
        output = child.result if failure is None else branch_rules.branch_error(failure)
        spec = group.branch(link.branch)
        done = Checkpoint(output=output, time=utcnow(), spec=spec, usage=child.usage)
        stored = await self.store.checkpoints.create(parent.task_id, link.step, done, link.branch)
        await self.tasks.branches.count(found, link.step, link.branch, stored)

    async def _fail_step_if_waiting(self, link: ParentStep, error: ErrorInfo) -> None:
        now = utcnow()

        def fail(record: TaskRecord) -> TaskRecord | None:
            waiting = child_rules.awaits(record, link)
            return rules.fail(record, link.step, error, now) if waiting else None

        stored, changed = await self.store.records.update(link.task_id, fail)
        if changed:
            await self.tasks.emit(Failed, stored.record, link.step, error=error)
            await self.resume_parent(stored.record)
            await self.cancel_pending(stored.record)

    async def cancel(self, record: TaskRecord) -> None:
        """`record` was cancelled: cancel every child of it that has not ended."""
        await self._cancel_children(record, pending_only=False)

    async def cancel_pending(self, record: TaskRecord) -> None:
        """`record` failed: cancel each of its children still `pending`. Nothing waits for
        them now, and one may never have been handed off (its starter died between its
        record and its hand-off); those that started run on."""
        await self._cancel_children(record, pending_only=True)

    async def _cancel_children(self, record: TaskRecord, *, pending_only: bool) -> None:
        ids = [*record.children, *record.starting]
        if ids:
            await asyncio.gather(*(self._cancel(record.task_id, c, pending_only) for c in ids))

    async def _cancel(self, parent_id: str, task_id: str, pending_only: bool) -> None:
        """Cancel the child `task_id`. A listed id may have no record (its start died
        before creating it) or name a task that is no child of `parent_id` (its start
        found the id taken, and gave up): either is left alone."""
        now = utcnow()

        def cancel(record: TaskRecord) -> TaskRecord | None:
            ours = record.parent is not None and record.parent.task_id == parent_id
            started = record.status is not TaskStatus.PENDING
            return None if not ours or (pending_only and started) else rules.cancel(record, now)

        found = await self.store.records.get(task_id)
        if found is None:
            return
        with contextlib.suppress(TaskNotFoundError):  # removed (`tether gc`) meanwhile
            stored, changed = await self.store.records.update(task_id, cancel, found)
            if changed:
                # A first step may run for 100 ms before its task says `running`. The
                # parent no longer waits for this child, so it is not resumed.
                await self.store.notify_cancelled(task_id)
                await self.tasks.emit(Cancelled, stored.record)
                await self.cancel(stored.record)
