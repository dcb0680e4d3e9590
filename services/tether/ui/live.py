"""Server-sent events for the dashboard's pages, followed from NATS: a task's status
events and token stream, and a beat whenever any task changes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from sse_starlette import ServerSentEvent

from tether.client import Client
from tether.errors import NatsUnavailableError
from tether.schemas.codec import encode
from tether.schemas.events import ends_feed

T = TypeVar("T")
CHANGES_EVERY = 1.0
"""At most one `changed` event a second on the list page, however busy the tasks."""
STALL_EVERY = 1.0
"""Seconds between looks at why an open task is not moving: a killed worker sends no
event, so without them its page would show the last heartbeat as if the step ran on."""


async def task_feed(
    client: Client,
    task_id: str,
    seen: int,
    generation: int,
    after: int,
    stall: str | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """`status` for each event after the first `seen` (the page shows those, of the
    task's run `generation`) until the end of that run or a later one; `token` for each
    chunk after stream sequence `after` (the `id` a reconnect sends back); `changed` when
    the kind of the task's stall is no longer `stall`, the one the page shows."""
    queue: asyncio.Queue[ServerSentEvent | None] = asyncio.Queue()

    async def statuses() -> None:
        count = 0
        async for event, _ in client.events(task_id):
            count += 1
            if count <= seen:
                continue  # the page has it (an end among them is a run before a retry)
            await queue.put(ServerSentEvent(encode(event).decode(), event="status"))
            if ends_feed(event, generation):
                break

    async def tokens() -> None:
        async for chunk in client.handle(task_id).stream(after):
            data = encode(chunk).decode()
            await queue.put(ServerSentEvent(data, event="token", id=str(chunk.stream_seq)))

    async def stalls() -> None:
        async for changed in stall_changes(client, task_id, stall):
            await queue.put(changed)

    async for item in _merged(queue, [statuses, tokens, stalls]):
        yield item


async def stall_changes(
    client: Client, task_id: str, shown: str | None
) -> AsyncIterator[ServerSentEvent]:
    """`changed` whenever the kind of stall `tether status` would name (a silent holder,
    no worker for the tool, a retry's wait) differs from the one shown, until the task
    ends: nothing else tells an open page that the step's worker went silent."""
    while True:
        try:
            record = await client.find(task_id)
            if record is None or record.status.is_terminal:
                return
            found = await client.stall(record)
        except NatsUnavailableError:  # NATS restarting: look again at the next beat
            await asyncio.sleep(STALL_EVERY)
            continue
        kind = None if found is None else found.kind
        if kind != shown:
            shown = kind
            yield ServerSentEvent("", event="changed")
        await asyncio.sleep(STALL_EVERY)


async def changes(client: Client) -> AsyncIterator[ServerSentEvent]:
    """A `changed` event (at most one a second) when any task's status moves."""
    moved = asyncio.Event()
    stop = await client.on_every_event(lambda _: moved.set())
    try:
        while True:
            await moved.wait()
            moved.clear()
            yield ServerSentEvent("", event="changed")
            await asyncio.sleep(CHANGES_EVERY)
    finally:
        await stop()


async def _merged(
    queue: asyncio.Queue[ServerSentEvent | None],
    producers: list[Callable[[], Awaitable[None]]],
) -> AsyncIterator[ServerSentEvent]:
    """What every producer puts on `queue`, until all are done; stopped with the reader."""

    async def run(producer: Callable[[], Awaitable[None]]) -> None:
        try:
            await producer()
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(run(producer)) for producer in producers]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


async def until_closed(closing: asyncio.Event, feed: AsyncIterator[T]) -> AsyncIterator[T]:
    """`feed` until `closing` is set: an open page's stream must not hold up a stop."""
    closed = asyncio.ensure_future(closing.wait())
    following: asyncio.Future[T] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(feed))
            await asyncio.wait({following, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                return
            try:
                yield following.result()
            except StopAsyncIteration:
                return
    finally:
        closed.cancel()
        if following is not None and not following.done():
            following.cancel()  # also when the reader went away mid-wait
        with contextlib.suppress(BaseException):
            if following is not None:
                await following
        with contextlib.suppress(BaseException):
            await feed.aclose()  # type: ignore[attr-defined]
