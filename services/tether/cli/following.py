"""Following a task: its events replayed then live, the running step's progress bar."""

from __future__ import annotations

import asyncio
import contextlib

from tether.cancellation import raise_if_cancelled
from tether.cli import render
from tether.cli.running import ExitCode, outcome
from tether.client import Client, TaskHandle
from tether.errors import NatsUnavailableError
from tether.schemas.tasks import Heartbeat, TaskRecord, TaskStatus

HEARTBEAT_POLL = 0.3
"""Seconds between reads of the heartbeat bucket while watching a terminal."""
CATCH_UP = 2.0
"""Seconds `watch` waits for the terminal event after the record has ended.

The record changes first and its event follows at once; the wait only matters if the
writer died in between, when the record alone decides the outcome.
"""


def live_heartbeat(record: TaskRecord, heartbeat: Heartbeat | None) -> Heartbeat | None:
    """The heartbeat if it belongs to the running step (it outlives its step by a TTL)."""
    if heartbeat is None or record.status is not TaskStatus.RUNNING:
        return None
    return heartbeat if heartbeat.step == record.current_step else None


# -- following a task ---------------------------------------------------------------


class EventFeed:
    """Every status event of a task, history first, into a view, until the end of its
    current run (`TaskHandle.events()`); `ended` is set then."""

    def __init__(self, handle: TaskHandle, view: render.EventView) -> None:
        self._handle = handle
        self._view = view
        self.ended = asyncio.Event()

    async def run(self) -> None:
        async for event in self._handle.events():
            self._view.event(event)
        self.ended.set()


async def show_tokens(handle: TaskHandle, view: render.EventView) -> None:
    async for chunk in handle.stream():
        view.token(chunk)


async def poll_heartbeats(client: Client, task_id: str, view: render.EventView) -> None:
    while True:
        try:
            view.heartbeat(await client.heartbeat(task_id))
        except NatsUnavailableError:
            pass  # reconnecting: the bar just pauses
        raise_if_cancelled()
        await asyncio.sleep(HEARTBEAT_POLL)


async def follow(
    client: Client, task_id: str, view: render.EventView, *, submitted: bool = False
) -> ExitCode:
    """Show the task's events (and progress) until it ends; the record decides the outcome.

    `submitted`: the task was just published, so its record may not exist yet (the
    dispatcher creates it); otherwise a missing record is an unknown id.
    """
    handle = client.handle(task_id)
    if not submitted:
        await handle.get()
    feed = EventFeed(handle, view)
    tokens = asyncio.create_task(show_tokens(handle, view))
    helpers = [asyncio.create_task(feed.run()), tokens]
    if view.shows_progress:
        helpers.append(asyncio.create_task(poll_heartbeats(client, task_id, view)))
    try:
        with view:
            record = await handle.wait_until_done()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(feed.ended.wait(), CATCH_UP)
            with contextlib.suppress(TimeoutError):  # the text ends before the task does
                await asyncio.wait_for(asyncio.shield(tokens), CATCH_UP)
            view.finish(record)
    finally:
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    return outcome(record)
