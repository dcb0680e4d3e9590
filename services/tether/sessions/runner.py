"""The dispatchers' side of sessions: whatever wakes a session (a message in its inbox,
the end of its run, the periodic look) brings it up to date with one rule
(`decisions.decide`), so a crash anywhere is repaired by the next wake.

Every change is written ahead: the state first (by compare-and-set), then what it says
is to do, each part idempotent (a message is taken by a compare-and-set on its own
subject, a run's task is created create-only, a told message carries its id), and the
state again once it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

import msgspec

from tether.clock import utcnow
from tether.errors import (
    InvalidTaskError,
    RevisionConflictError,
    TaskConflictError,
    TaskExistsError,
)
from tether.nats.store import Store
from tether.schemas.events import MessageSent
from tether.schemas.ids import InvalidNameError, validate_session_id
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.sessions import RunStarted, SessionState
from tether.sessions.decisions import Incoming, Refusal, RunEnd, decide
from tether.tasks.conformance import check_answer
from tether.tasks.service import TaskService

log = logging.getLogger("tether.sessions")
STEPS = 12
"""Reads and writes one wake may take before it leaves the rest to the next wake."""
_RUN_TASK = re.compile(r"^(.+)-r[0-9]+$")


class SessionRunner:
    """Brings sessions up to date; one per dispatcher, any number of dispatchers."""

    def __init__(self, store: Store, tasks: TaskService) -> None:
        self._store = store
        self._sessions = store.sessions
        self._tasks = tasks
        self._locks: dict[str, asyncio.Lock] = {}

    async def wake(self, session_id: str) -> None:
        """Bring one session up to date (one wake at a time per session here; other
        dispatchers' are kept apart by the compare-and-set)."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            for _ in range(STEPS):
                try:
                    if not await self._step(session_id):
                        break
                except RevisionConflictError:
                    continue
        if not lock.locked():
            self._locks.pop(session_id, None)

    async def run_ended(self, task_id: str) -> None:
        """A task ended: wake its session if it is one's run under way."""
        named = _RUN_TASK.match(task_id)
        if named is None:
            return
        try:
            found = await self._sessions.get(named.group(1))
            if found is not None and found.state.current == task_id:
                await self.wake(named.group(1))
        except Exception as exc:  # a hint: the dispatchers' periodic look repairs it
            log.warning("session of task %s not moved on at its end: %s", task_id, exc)

    async def look(self) -> None:
        """Wake every session with a run under way or messages waiting (a run's end
        notice is a hint, lost while no dispatcher listens)."""
        for session_id, state in (await self._sessions.states()).items():
            if state.current is not None or state.queued or state.carried:
                await self.wake(session_id)

    async def _step(self, session_id: str) -> bool:
        """Read, decide, write; whether anything changed."""
        found = await self._sessions.get(session_id)
        state, revision = (found.state, found.revision) if found else (None, 0)
        read = await self._sessions.after(session_id, state.seen if state else 0)
        incoming = [Incoming(*stored) for stored in read]
        ended = await self._ended(state) if state is not None else None
        unknown = await self._refusal(session_id, incoming) if state is None else None
        decision = decide(session_id, state, incoming, ended=ended, refusal=unknown)
        for refusal in decision.refusals:
            await self._refuse(session_id, refusal)
        new = decision.state
        if new is None:
            return False
        if new != state:
            revision = await self._sessions.change(session_id, new, revision)
        return await self._do(session_id, new, revision) or new != state

    async def _do(self, session_id: str, state: SessionState, revision: int) -> bool:
        """What the state says is to do: start its run, tell it messages."""
        if state.current is None:
            return False
        if state.inputs:
            started = await self._start(session_id, state)
            # Every message withdrawn first: no run, and its number is the next run's.
            undone: dict[str, Any] = {"inputs": [], "current": None, "runs": state.runs - 1}
            done: dict[str, Any] = {"inputs": []} if started else undone
            await self._sessions.change(session_id, _with(state, **done), revision)
            return True
        if state.steer:
            told, late = [], []
            for message_id in state.steer:
                text = await self._take(session_id, message_id, state.current)
                if text is None:
                    continue  # withdrawn before it was taken
                try:
                    await self._tasks.steer(state.current, MessageSent, message_id, text=text)
                except TaskConflictError:
                    late.append(message_id)  # the run ended first: the next one reads it
                else:
                    told.append(message_id)
            changed = _with(
                state, steer=[], steered=state.steered + told, carried=state.carried + late
            )
            await self._sessions.change(session_id, changed, revision)
            return True
        if state.answers:
            for message_id in state.answers:
                await self._give(session_id, message_id, state.current)
            await self._sessions.change(session_id, _with(state, answers=[]), revision)
            return True
        return False

    async def _give(self, session_id: str, message_id: str, task_id: str) -> None:
        """Answer the question run `task_id` waits on, once: the answer is marked with the
        step it answers before it is given, so given again after a crash it reaches that
        step's question or nothing (never a later question)."""
        while True:
            stored = await self._sessions.latest(session_id, message_id)
            if stored is None or stored.message.refused or stored.message.withdrawn:
                return
            found = await self._store.records.get(task_id)
            record = None if found is None else found.record
            waiting = record is not None and record.status is TaskStatus.WAITING
            step = stored.message.step
            if stored.message.taken_by is None:
                why = _unfit(task_id, record, stored.message.input)
                if why is not None:
                    await self._refuse(session_id, Refusal(stored.seq, message_id, why))
                    return
                assert record is not None
                step = record.current_step
                taken = msgspec.structs.replace(stored.message, taken_by=task_id, step=step)
                try:
                    await self._sessions.put(session_id, message_id, taken, stored.seq)
                except RevisionConflictError:
                    continue  # withdrawn or edited just now: read it again
            if waiting and record is not None and record.current_step == step:
                with contextlib.suppress(TaskConflictError):  # answered meanwhile
                    await self._tasks.answers.send_input(task_id, stored.message.input)
            return

    async def _start(self, session_id: str, state: SessionState) -> bool:
        """Take the run's messages and create its task (and its boundary), once; False
        when every message was withdrawn first."""
        assert state.current is not None
        taken = [(m, await self._take(session_id, m, state.current)) for m in state.inputs]
        said = [(message_id, text) for message_id, text in taken if text is not None]
        if not said:
            return False
        start: dict[str, Any] = {"input": [{"role": "user", "content": t} for _, t in said]}
        if state.last is not None:
            start["after"] = state.last
        submit = TaskSubmit(
            task_id=state.current,
            steps=[StepSpec(tool=state.agent, input=start)],
            metadata={"session": session_id},
        )
        try:
            await self._tasks.start(submit)
        except TaskExistsError:
            pass  # started before a crash (this is its id), or by another dispatcher
        run = RunStarted(
            session_id=session_id,
            run=state.runs,
            task_id=state.current,
            messages=[message_id for message_id, _ in said],
            after=state.last,
            time=utcnow(),
        )
        await self._sessions.mark_run(run)
        return True

    async def _take(self, session_id: str, message_id: str, task_id: str) -> str | None:
        """Mark a message taken by `task_id` (an edit that lands first is what is
        taken); its text, or None when it was withdrawn or refused."""
        while True:
            stored = await self._sessions.latest(session_id, message_id)
            if stored is None or stored.message.withdrawn or stored.message.refused:
                return None
            if stored.message.taken_by is not None:
                return stored.message.text
            taken = msgspec.structs.replace(stored.message, taken_by=task_id)
            try:
                await self._sessions.put(session_id, message_id, taken, stored.seq)
            except RevisionConflictError:
                continue  # edited or withdrawn just now: read it again
            return stored.message.text

    async def _refuse(self, session_id: str, refusal: Refusal) -> None:
        stored = await self._sessions.latest(session_id, refusal.message_id)
        if stored is None or stored.seq != refusal.seq:
            return  # edited since: the edit is read (and refused) in turn
        refused = msgspec.structs.replace(stored.message, refused=refusal.reason)
        try:
            await self._sessions.put(session_id, refusal.message_id, refused, stored.seq)
        except RevisionConflictError:
            return
        log.info("session %s: message %s refused: %s", session_id, stored.message_id, refusal)

    async def _ended(self, state: SessionState) -> RunEnd | None:
        if state.current is None or state.inputs:
            return None
        found = await self._store.records.get(state.current)
        if found is None or not found.record.status.is_terminal:
            return None
        record = found.record
        unread = await self._unread(record, state.steered) if state.steered else []
        return RunEnd(record.task_id, record.status is TaskStatus.COMPLETED, unread)

    async def _unread(self, record: TaskRecord, steered: list[str]) -> list[str]:
        """Those of `steered` the run never read: told after its last look at its inbox
        (an agent's turn that read some outputs `{"inbox": [{"seq": n, ...}]}`)."""
        read = 0
        for step in range(record.plan_length):
            checkpoint = await self._store.checkpoints.get(record.task_id, step)
            output = None if checkpoint is None else checkpoint.output
            if isinstance(output, dict) and set(output) == {"inbox"}:
                read = max([read, *(int(item.get("seq") or 0) for item in output["inbox"])])
        told = await self._store.inbox.ids_after(record.task_id, read)
        return [message_id for message_id in told if message_id in steered]

    async def _refusal(self, session_id: str, incoming: list[Incoming]) -> str | None:
        """Why a new session cannot be: an id unfit for its runs' task ids, or an agent
        that cannot answer it."""
        try:
            validate_session_id(session_id)
        except InvalidNameError as exc:
            return str(exc)
        return await self._unknown_agent(incoming)

    async def _unknown_agent(self, incoming: list[Incoming]) -> str | None:
        """Why the agent a new session's first message names cannot answer it."""
        named = next((e.message.agent for e in incoming if not e.message.settled), None)
        if named is None:
            return None
        info = await self._store.tools.get(named)
        if info is not None and info.agent:
            return None
        return unknown_agent_reason(named, info is not None)


def _unfit(task_id: str, record: TaskRecord | None, answer: Any) -> str | None:
    """Why `answer` cannot answer run `task_id` now (None: it can)."""
    if record is None or record.status is not TaskStatus.WAITING:
        status = "gone" if record is None else record.status.value
        return f"run {task_id!r} asks nothing now (it is {status})"
    if record.input_request is not None:
        try:
            check_answer(task_id, record.input_request, answer)
        except InvalidTaskError as exc:
            return str(exc)
    return None


def unknown_agent_reason(agent: str, is_tool: bool) -> str:
    if is_tool:
        return f"{agent!r} is a tool, not an agent: a session talks to an agent"
    return (
        f"no agent named {agent!r} is registered: start a worker that serves it "
        "(tether worker MODULE:app), or check the name"
    )


def _with(state: SessionState, **changes: Any) -> SessionState:
    changed: SessionState = msgspec.structs.replace(state, **changes)
    return changed
