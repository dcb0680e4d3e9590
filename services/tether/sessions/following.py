"""Following a session, not a task: its run boundaries (`<prefix>.session.<id>.out.<run>`)
and, between them, each run's status events and streamed text, read from the run's own
subjects (nothing is copied). A position names the run's boundary by its stream sequence
and how far into the run's events and text the follower read, so a follower that comes
back resumes there: every event and every chunk once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from tether.errors import InvalidTaskError
from tether.nats.feeds import task_events
from tether.nats.sessions import decode_run
from tether.nats.store import Store
from tether.nats.tokens import token_chunks
from tether.schemas.events import AnyStatusEvent, ends_feed
from tether.schemas.records import TaskRecord
from tether.schemas.sessions import RunStarted
from tether.schemas.work import TokenChunk

Kind = Literal["run_started", "event", "text", "run_ended"]


@dataclass(frozen=True)
class Position:
    """Where a follower is: the run's boundary (stream sequence), the last of its events
    and chunks read, and whether the run's end was seen."""

    run_seq: int = 0
    event_seq: int = 0
    text_seq: int = 0
    ended: bool = False

    def __str__(self) -> str:
        end = ".end" if self.ended else ""
        return f"{self.run_seq}.{self.event_seq}.{self.text_seq}{end}"

    @classmethod
    def parse(cls, text: str) -> Position:
        parts = text.split(".")
        ended = parts[-1] == "end"
        numbers = parts[:-1] if ended else parts
        if len(numbers) != 3 or not all(n.isdigit() for n in numbers):
            raise InvalidTaskError(
                f"{text!r} is not a session position: pass a `position` a follower gave"
            )
        run, event, text_seq = (int(n) for n in numbers)
        return cls(run, event, text_seq, ended)


@dataclass(frozen=True)
class SessionUpdate:
    """One thing that happened in a session. `kind`: `run_started` (`started` says which
    messages began it), `event` (a status event of the run's task), `text` (a piece of
    the answer as the model writes it: `text`, and the `chunk` it came in) or
    `run_ended` (`record`: the run's task as it ended, its answer in `record.result`).
    Pass `position` to `follow(after=...)` to go on after this update."""

    kind: Kind
    run: int
    task_id: str
    position: str
    text: str = ""
    chunk: TokenChunk | None = None
    event: AnyStatusEvent | None = None
    started: RunStarted | None = None
    record: TaskRecord | None = None


async def follow(
    store: Store, session_id: str, after: str | None = None
) -> AsyncIterator[SessionUpdate]:
    """Every update of the session after position `after` (None: from its first run), as
    it happens, without end."""
    resume = Position.parse(after) if after else None
    start = resume.run_seq - 1 if resume is not None else 0
    async with store.sessions.runs(session_id, max(start, 0)) as runs:
        while True:
            msg = await runs.next()
            started = None if msg is None else decode_run(msg.data)
            if started is None:
                continue
            here = Position(runs.seen)
            if resume is not None and resume.run_seq == runs.seen:
                here, resume = resume, None
                if here.ended:
                    continue
            else:
                yield SessionUpdate(
                    "run_started", started.run, started.task_id, str(here), started=started
                )
            async for update in _run(store, started, here):
                yield update


async def _run(store: Store, started: RunStarted, at: Position) -> AsyncIterator[SessionUpdate]:
    """One run's events and text, merged as they come, then its end."""
    task_id = started.task_id
    found = await store.records.get(task_id)
    generation = found.record.generation if found is not None else 1
    heard: asyncio.Queue[tuple[str, Any, int]] = asyncio.Queue()

    async def pump(kind: str, source: AsyncIterator[tuple[Any, int]]) -> None:
        try:
            async for item, seq in source:
                await heard.put((kind, item, seq))
                if kind == "event" and ends_feed(item, generation):
                    break
        except Exception as exc:  # said to the follower, not lost in a task
            await heard.put(("error", exc, 0))
        await heard.put(("done", None, 0))

    readers = [
        asyncio.create_task(pump("event", task_events(store, task_id, after=at.event_seq))),
        asyncio.create_task(pump("text", token_chunks(store, task_id, at.text_seq))),
    ]
    event_seq, text_seq, running = at.event_seq, at.text_seq, len(readers)
    try:
        while running:
            kind, item, seq = await heard.get()
            if kind == "error":
                raise item
            if kind == "done":
                running -= 1
                continue
            if kind == "event":
                event_seq = seq
            else:
                text_seq = seq
            here = str(Position(at.run_seq, event_seq, text_seq))
            if kind == "event":
                yield SessionUpdate("event", started.run, task_id, here, event=item)
            else:
                yield SessionUpdate("text", started.run, task_id, here, text=item.delta, chunk=item)
    finally:
        for reader in readers:
            reader.cancel()
        for reader in readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
    ended = await store.records.get(task_id)
    here = str(Position(at.run_seq, event_seq, text_seq, ended=True))
    record = None if ended is None else ended.record
    yield SessionUpdate("run_ended", started.run, task_id, here, record=record)
