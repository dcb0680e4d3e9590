"""A session's wire messages: what a sender puts in its inbox, its state, its run boundaries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec


class SessionMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message on `<prefix>.session.<id>.in.<message id>`.

    A sender writes `text` (and `agent` on a session's first message; `queue` for the next
    turn rather than steering the run under way; `close` to close the session), or `input`
    (an answer to what the run under way asks: an approval, a question), or `withdrawn`
    in place of a message not taken yet. A dispatcher writes the same message
    again with `taken_by` (the run that took it) or `refused` (why it was not), expecting
    the sequence it read, so that an edit and a take never both land.
    """

    text: str = ""
    agent: str | None = None
    """The agent the session is bound to (its first message names it)."""
    queue: bool = False
    """Wait for the next turn (else: steer the run under way, or start one)."""
    close: bool = False
    """Close the session: later messages are refused."""
    input: Any = None
    """An answer to the question the run under way waits on (its task's input request)."""
    withdrawn: bool = False
    taken_by: str | None = None
    """The task of the run that took it (as its input, or told it while it ran)."""
    refused: str | None = None
    """Why no run took it (a closed session, an unknown agent)."""
    step: int | None = None
    """With `taken_by` on an answer (`input`): the step of the run it answers."""

    @property
    def settled(self) -> bool:
        """Whether no edit can change it any more (taken, refused or withdrawn)."""
        return self.taken_by is not None or self.refused is not None or self.withdrawn


class SessionState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A session, under its id in `<prefix>-sessions`; only the dispatchers write it, each
    change by compare-and-set. Its lists hold message ids, so it stays small however long
    the conversation: a run continues the last by reference (`after`)."""

    agent: str
    runs: int = 0
    """Runs started so far; run n is task `<id>-r<n>` (`Names.run_task_id`)."""
    current: str | None = None
    """The task of the run under way."""
    last: str | None = None
    """The task of the last run that completed: the conversation the next one continues."""
    seen: int = 0
    """The inbox's stream sequence read through."""
    inputs: list[str] = msgspec.field(default_factory=list)
    """Messages `current` starts with, until its task exists."""
    steer: list[str] = msgspec.field(default_factory=list)
    """Messages to tell `current` while it runs, until told."""
    steered: list[str] = msgspec.field(default_factory=list)
    """Messages told `current`: any it did not read before it ended go to the next run."""
    queued: list[str] = msgspec.field(default_factory=list)
    """Messages for the next run (still editable: none took them)."""
    carried: list[str] = msgspec.field(default_factory=list)
    """Messages taken already that the next run starts with (told a run that ended first)."""
    answers: list[str] = msgspec.field(default_factory=list)
    """Answers (`input`) to give `current`, until given (its end waits for them)."""
    closed: bool = False


class RunStarted(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """On `<prefix>.session.<id>.out.<run>`, once: the session's run `run` is task
    `task_id`, continuing task `after`, started by these messages."""

    session_id: str
    run: int
    task_id: str
    messages: list[str]
    after: str | None = None
    time: datetime | None = None
