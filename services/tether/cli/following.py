"""Following a task: its events replayed then live, the running step's progress bar."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from tether.cancellation import raise_if_cancelled
from tether.cli import render
from tether.cli.running import ExitCode, outcome
from tether.cli.transcript import Transcript
from tether.client import Client, TaskHandle
from tether.errors import NatsUnavailableError
from tether.schemas.events import AnyStatusEvent
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.work import TokenChunk
from tether.schemas.workers import Heartbeat

HEARTBEAT_POLL = 0.3
"""Seconds between reads of the heartbeat bucket while watching a terminal."""
STALL_POLL = 1.0
"""Seconds between looks at what a followed task waits for (see `Client.stall`)."""
CATCH_UP = 2.0
"""Seconds `watch` waits for the text written before an event (it follows at once; the
wait only matters if a writer died in between, or NATS is away)."""
CATCH_UP_AT_MOST = 30.0
"""Seconds `watch` waits, after the record has ended, for its follower to show the last
event stored (it is behind only after NATS was away)."""


def live_heartbeat(record: TaskRecord, heartbeat: Heartbeat | None) -> Heartbeat | None:
    """The heartbeat if it belongs to the running step (it outlives its step by a TTL)."""
    if heartbeat is None or record.status is not TaskStatus.RUNNING:
        return None
    return heartbeat if heartbeat.step == record.current_step else None


# -- following a task ---------------------------------------------------------------


class TextFeed:
    """The task's streamed text, read as it is written; `seen` is the stream sequence of
    the last chunk read."""

    def __init__(self, handle: TaskHandle, shown: Callable[[TokenChunk], None]) -> None:
        self._handle = handle
        self._shown = shown
        self.seen = 0
        self._moved = asyncio.Event()
        self.ended = asyncio.Event()

    async def run(self) -> None:
        try:
            async for chunk in self._handle.stream():
                self._shown(chunk)
                self.seen = chunk.stream_seq or self.seen
                self._moved.set()
        finally:
            self.ended.set()
            self._moved.set()

    async def reach(self, sequence: int, within: float) -> None:
        """Wait until every chunk up to `sequence` was read (or `within` seconds pass)."""
        deadline = asyncio.get_running_loop().time() + within
        while self.seen < sequence and not self.ended.is_set():
            self._moved.clear()
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left)


class Following:
    """A task's events and text, in one order (see `transcript`): before each event is
    shown, the text written before it has been read."""

    def __init__(self, client: Client, handle: TaskHandle, view: render.EventView) -> None:
        self._client = client
        self._handle = handle
        self._view = view
        self._transcript = Transcript()
        self.text = TextFeed(handle, lambda chunk: view.show(self._transcript.chunk(chunk)))
        self.ended = asyncio.Event()
        """Set once the events of the task's current run have all been shown."""
        self._shown: list[AnyStatusEvent] = []
        self._new = asyncio.Event()

    async def read_text(self) -> None:
        """Wait until the text written so far has been read (`CATCH_UP` at most)."""
        try:
            written = await self._client.text_position(self._handle.task_id)
        except NatsUnavailableError:
            written = 0  # reconnecting: show the event now, the text follows
        await self.text.reach(written, CATCH_UP)

    async def events(self) -> None:
        async for event in self._handle.events():
            await self.read_text()
            self._view.show(self._transcript.event(event))
            self._shown.append(event)
            self._new.set()
        self.ended.set()
        self._new.set()

    async def catch_up(self) -> None:
        """The task ended: wait until the last event stored for it has been shown (a
        follower resuming after NATS was away may be behind), `CATCH_UP_AT_MOST`. If its
        writer died before the terminal event, that is an earlier one, shown already."""
        try:
            last = await self._client.last_event(self._handle.task_id)
        except NatsUnavailableError:
            last = None
        loop = asyncio.get_running_loop()
        until = loop.time() + CATCH_UP_AT_MOST
        while last is not None and last not in self._shown and not self.ended.is_set():
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), until - loop.time())
            if loop.time() >= until:
                return

    def close(self) -> None:
        self._view.show(self._transcript.close())


async def poll_heartbeats(client: Client, task_id: str, view: render.EventView) -> None:
    while True:
        try:
            view.heartbeat(await client.heartbeat(task_id))
        except NatsUnavailableError:
            pass  # reconnecting: the bar just pauses
        raise_if_cancelled()
        await asyncio.sleep(HEARTBEAT_POLL)


async def say_stalls(client: Client, task_id: str, view: render.EventView) -> None:
    """Say once what the task waits for each time that changes: a worker serving its next
    step's tool, or a dispatcher to record it (a retry is an event already)."""
    said: tuple[str, object] | None = None
    while True:
        await asyncio.sleep(STALL_POLL)  # first: a task recorded and started at once is not stalled
        try:
            record = await client.find(task_id)
            stall = await (client.queued(task_id) if record is None else client.stall(record))
        except NatsUnavailableError:
            stall = None  # reconnecting: nothing new to say
        if stall is not None and stall.kind != "retry" and (stall.kind, stall.since) != said:
            said = (stall.kind, stall.since)
            view.note(stall.message)
        raise_if_cancelled()


async def follow(
    client: Client, task_id: str, view: render.EventView, *, submitted: bool = False
) -> ExitCode:
    """Show the task's events, its streamed text (and progress) until it ends; the record
    decides the outcome.

    `submitted`: the task was just published, so its record may not exist yet (the
    dispatcher creates it); otherwise a missing record is an unknown id.
    """
    handle = client.handle(task_id)
    if not submitted:
        await handle.get()
    following = Following(client, handle, view)
    text = asyncio.create_task(following.text.run())
    helpers = [asyncio.create_task(following.events()), text]
    if view.shows_progress:
        helpers.append(asyncio.create_task(poll_heartbeats(client, task_id, view)))
    helpers.append(asyncio.create_task(say_stalls(client, task_id, view)))
    try:
        with view:
            record = await handle.wait_until_done()
            await following.catch_up()
            # Every chunk is stored before the step that wrote it ends: the last one now is
            # the last for good. Waiting for the text feed to notice the end costs a poll.
            await following.read_text()
            following.close()
            view.finish(record)
    finally:
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    return outcome(record)
