"""The order in which `watch` shows a task: each step's streamed text under the event that
started it, whole, before the event that ended it (pure: no I/O).

Events and text come on two feeds, so they may arrive in any order relative to each
other. The follower waits, before each event, until it has read every chunk written
before that event (see `following`); `Transcript` then puts them in one order, the same
when following live and when replaying a finished task:

- text of a step whose `step_started` line is out is shown as it arrives;
- text that comes before its step's line (or of a parallel branch) waits, and is shown
  after that line (a branch's: whole, before the branch's last event);
- an attempt's text ends with its `done` chunk, or when an event ends or replaces the
  attempt (then it was cut off).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.schemas.events import AnyStatusEvent, StepCompleted, StepStarted
from tether.schemas.work import TokenChunk

Key = tuple[int, int | None]
"""A step, and its branch in a parallel step."""


@dataclass(frozen=True)
class Shown:
    """An event line."""

    event: AnyStatusEvent


@dataclass(frozen=True)
class Piece:
    """A piece of a step's text, shown as it comes."""

    step: int
    branch: int | None
    attempt: int
    text: str


@dataclass(frozen=True)
class TextEnd:
    """The end of an attempt's text (`cut_off`: it never sent its last chunk)."""

    step: int
    branch: int | None
    attempt: int
    cut_off: bool


Output = Shown | Piece | TextEnd


@dataclass
class _Text:
    attempt: int
    pieces: list[str] = field(default_factory=list)
    done: bool = False
    shown: bool = False
    """Its step's line is out: its pieces are shown as they come."""


class Transcript:
    def __init__(self) -> None:
        self._texts: dict[Key, _Text] = {}
        """The latest attempt of each step that streamed, until its text ended."""
        self._latest: dict[Key, int] = {}
        self._started: dict[Key, int] = {}
        """The attempt of each step whose `step_started` line is out."""
        self._written: dict[tuple[Key, int], _Text] = {}
        """Everything each attempt wrote, until its step completes: when two attempts ran
        at once and the earlier one won, its whole text is shown again under the event."""

    def chunk(self, chunk: TokenChunk) -> list[Output]:
        key = (chunk.step, chunk.branch)
        written = self._written.setdefault((key, chunk.attempt), _Text(chunk.attempt))
        written.pieces.append(chunk.delta)
        written.done = written.done or chunk.done
        if chunk.attempt < self._latest.get(key, chunk.attempt):
            return []  # a late chunk of an attempt already replaced
        out = self._replace(key, chunk.attempt)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = _Text(chunk.attempt)
            text.shown = chunk.branch is None and self._started.get(key) == chunk.attempt
        if not text.shown:
            text.pieces.append(chunk.delta)
            text.done = chunk.done
            return out
        if chunk.delta:
            out.append(Piece(*key, chunk.attempt, chunk.delta))
        if chunk.done:
            text.done = True
            out += self._end(key)
        return out

    def event(self, event: AnyStatusEvent) -> list[Output]:
        out: list[Output] = []
        if event.kind in ("completed", "failed", "cancelled"):
            out += self.close()  # the task (or this run of it) ended: all text ends
        elif event.step is None:
            pass
        elif isinstance(event, StepStarted):
            out += self._replace((event.step, event.branch), event.attempt or 1)
        else:  # any other event of a step ends what its attempt streamed (not a later one's)
            key = (event.step, event.branch)
            text = self._texts.get(key)
            completed = isinstance(event, StepCompleted)  # whichever attempt: all text ends
            later = event.attempt is None or event.attempt >= (text.attempt if text else 0)
            if text is not None and (completed or later):
                out += self._end(key)
            if completed:
                out += self._winner(key, event.attempt)
        out.append(Shown(event))
        if isinstance(event, StepStarted) and event.step is not None:
            key = (event.step, event.branch)
            self._started[key] = event.attempt or 1
            if event.branch is None:
                out += self._show(key)
        return out

    def _winner(self, key: Key, attempt: int | None) -> list[Output]:
        """The text of the attempt a `step_completed` names, again, when a later attempt's
        replaced it on the screen (it was stopped, and this one's result stored)."""
        written = {a: text for (k, a), text in self._written.items() if k == key}
        for a in written:
            del self._written[(key, a)]
        won = written.get(attempt or 0)
        if won is None or attempt is None or attempt >= self._latest.get(key, 0):
            return []
        text = "".join(won.pieces)
        return [Piece(*key, attempt, text), TextEnd(*key, attempt, cut_off=not won.done)]

    def close(self) -> list[Output]:
        """Every text ends (the task is over): what waited is shown first."""
        return [out for key in list(self._texts) for out in self._end(key)]

    def _replace(self, key: Key, attempt: int) -> list[Output]:
        """A newer attempt of `key` began: the text of an older one ends, cut off."""
        if attempt <= self._latest.get(key, 0):
            return []
        self._latest[key] = attempt
        text = self._texts.get(key)
        return self._end(key) if text is not None and text.attempt < attempt else []

    def _show(self, key: Key) -> list[Output]:
        """Show the waiting pieces of `key`'s text; from here on they come as they arrive."""
        text = self._texts.get(key)
        if text is None or text.shown:
            return []
        text.shown = True
        out: list[Output] = [Piece(*key, text.attempt, piece) for piece in text.pieces if piece]
        text.pieces.clear()
        return out + (self._end(key) if text.done else [])

    def _end(self, key: Key) -> list[Output]:
        text = self._texts.get(key)
        if text is None:
            return []
        out: list[Output] = [] if text.shown else self._show(key)
        if key not in self._texts:  # showing it ended it (its last chunk had come)
            return out
        del self._texts[key]
        return [*out, TextEnd(*key, text.attempt, cut_off=not text.done)]
