"""What a session does with what came to its inbox: a pure rule, no I/O.

- A session is made by its first message, which names its agent; a later message that
  names another agent is refused, as is every message after the session was closed
  (what came before the close still gets its turn).
- A message to an idle session starts a run with it (run n is `<id>-r<n>`), together
  with whatever waited for a next run.
- A message while a run is under way steers it (the run reads it before its next model
  call), unless its sender asked to `queue` it for the next turn; a message that comes
  while the run's task is not made yet joins the run's input instead.
- When the run ends, whatever it was told and did not read (or was to be told: messages
  read with its end), then what was queued, start the next run. A run that completed is
  what the next one continues; one that failed or was cancelled is not (the next
  continues the last that completed).
- An answer (`input`) goes to the run under way, whose question it answers; with no run
  under way it is refused. A run's end is taken only once its answers were given.
- A message the dispatcher wrote (taken, refused), a withdrawal, an edit of a message
  still waiting, and a repeat change nothing more than the lists say.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from tether.schemas.names import Names
from tether.schemas.sessions import SessionMessage, SessionState


class Incoming(NamedTuple):
    """A message read from the inbox: its stream sequence, id and content."""

    seq: int
    message_id: str
    message: SessionMessage


class RunEnd(NamedTuple):
    """The run under way has ended; `unread`: messages told it that it never read."""

    task_id: str
    completed: bool
    unread: list[str]


class Refusal(NamedTuple):
    seq: int
    message_id: str
    reason: str


class Decision(NamedTuple):
    state: SessionState | None
    """The session's new state (None: there is still no session)."""
    refusals: list[Refusal]


def decide(
    session_id: str,
    state: SessionState | None,
    incoming: list[Incoming],
    *,
    ended: RunEnd | None = None,
    refusal: str | None = None,
) -> Decision:
    """The session's next state after `incoming` (in inbox order) and the end of its run.

    `refusal`: why a new session cannot be (an id unfit for task ids, an unknown agent)."""
    if state is None:
        return _first(session_id, incoming, refusal)
    told = _Told(state)
    # The messages first: they came while the run was under way (or as it ended), so
    # those meant to steer it that it can no longer read go, first, to the next run.
    refusals = [r for entry in incoming if (r := told.take(session_id, entry)) is not None]
    if ended is not None and ended.task_id == state.current and not told.answers:
        told.end(ended)
    told.start_next(session_id)
    return Decision(told.state(), refusals)


def _first(session_id: str, incoming: list[Incoming], refusal: str | None) -> Decision:
    """A session's first messages: the first that is not settled names its agent."""
    waiting = [entry for entry in incoming if not _settled(entry.message)]
    answers = [entry for entry in waiting if entry.message.input is not None]
    if answers and answers == waiting:  # no run to answer, nor one to start
        nothing = f"session {session_id!r} has no run under way: nothing asks for an answer"
        return Decision(None, [Refusal(e.seq, e.message_id, nothing) for e in answers])
    if not waiting:
        return Decision(None, [])
    agent = next(e.message.agent for e in waiting if e.message.input is None)
    if agent is None or refusal is not None:
        reason = refusal or (
            f"session {session_id!r} does not exist yet: its first message names the agent "
            "that answers it (agent=...)"
        )
        return Decision(None, [Refusal(e.seq, e.message_id, reason) for e in waiting])
    return decide(session_id, SessionState(agent=agent), incoming)


def _settled(message: SessionMessage) -> bool:
    return message.settled


class _Told:
    """The state's lists as the messages are read, in order."""

    def __init__(self, state: SessionState) -> None:
        self._state = state
        self.runs = state.runs
        self.current = state.current
        self.last = state.last
        self.seen = state.seen
        self.closed = state.closed
        self.inputs = list(state.inputs)
        self.steer = list(state.steer)
        self.steered = list(state.steered)
        self.queued = list(state.queued)
        self.carried = list(state.carried)
        self.answers = list(state.answers)

    def end(self, ended: RunEnd) -> None:
        if ended.completed:
            self.last = ended.task_id
        # Told too late, or not told yet: both are the next run's first words.
        self.carried += [m for m in ended.unread if m not in self.carried] + self.steer
        self.current, self.steer, self.steered = None, [], []

    def known(self, message_id: str) -> bool:
        lists = (self.inputs, self.steer, self.steered, self.queued, self.carried, self.answers)
        return any(message_id in held for held in lists)

    def take(self, session_id: str, entry: Incoming) -> Refusal | None:
        seq, message_id, message = entry
        self.seen = max(self.seen, seq)
        if message.taken_by is not None or message.refused is not None:
            return None  # the dispatchers' own mark
        if message.withdrawn:
            if message_id in self.queued:
                self.queued.remove(message_id)
            return None
        if self.known(message_id):
            return None  # an edit of a message that waits (read when taken), or a repeat
        refused = self._refusal(session_id, message)
        if refused is not None:
            return Refusal(seq, message_id, refused)
        self._place(session_id, message_id, message)
        return None

    def _refusal(self, session_id: str, message: SessionMessage) -> str | None:
        if self.closed:
            return f"session {session_id!r} is closed"
        if message.agent is not None and message.agent != self._state.agent:
            return (
                f"session {session_id!r} is bound to agent {self._state.agent!r}, not "
                f"{message.agent!r}: use another session id for another agent"
            )
        if message.input is not None and (self.current is None or self.inputs):
            return f"session {session_id!r} has no run under way: nothing asks for an answer"
        return None

    def _place(self, session_id: str, message_id: str, message: SessionMessage) -> None:
        """Where a message goes: the run under way, a new run, or the next run."""
        if message.close:
            self.closed = True
        elif message.input is not None:
            self.answers.append(message_id)
        elif self.current is None:
            self.carried += [*self.queued, message_id]
            self.queued = []
            self.start(session_id)
        elif message.queue:
            self.queued.append(message_id)
        elif self.inputs:
            self.inputs.append(message_id)
        else:
            self.steer.append(message_id)

    def start(self, session_id: str) -> None:
        self.runs += 1
        self.current = Names.run_task_id(session_id, self.runs)
        self.inputs, self.carried = self.carried, []

    def start_next(self, session_id: str) -> None:
        """An idle session with messages waiting starts its next run."""
        if self.current is None and (self.carried or self.queued):
            self.carried += self.queued
            self.queued = []
            self.start(session_id)

    def state(self) -> SessionState:
        return msgspec.structs.replace(
            self._state,
            runs=self.runs,
            current=self.current,
            last=self.last,
            seen=self.seen,
            closed=self.closed,
            inputs=self.inputs,
            steer=self.steer,
            steered=self.steered,
            queued=self.queued,
            carried=self.carried,
            answers=self.answers,
        )
