"""Task status pushed to connected clients, from Tether's status events.

One core-NATS subscription per gateway sees every task's status events (whichever
process caused them) and wakes the local followers of that task, which re-read the
record and push it if its MCP status changed:

- 2025-11-25: `notifications/tasks/status` on the session's standalone stream, for
  the tasks the session created or polled (`LegacyPush`);
- 2026-07-28: `notifications/tasks` on a `subscriptions/listen` stream that named the
  task ids (`TaskListen`).

Followers live only as long as a connection listens; a client that reconnects polls
and re-subscribes, so a gateway restart loses no task state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import mcp_types as types
import msgspec
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from tether.errors import TaskNotFoundError
from tether.gateway import errors
from tether.gateway.backend import TaskBackend
from tether.gateway.callers import caller_of
from tether.gateway.protocol import declares_tasks
from tether.gateway.tasks import detailed_task, legacy_task, mcp_status
from tether.mcp_tasks import TERMINAL_STATUSES
from tether.schemas.codec import event_decoder

log = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
Listener = Callable[[str], None]

FOLLOW_LIMIT = 24 * 3600.0
"""Seconds a 2025-11-25 session follows a task that never ends (the session may be long gone)."""


class _Notification(types.Notification[dict[str, Any], str]):
    """A server notification outside the SDK's typed vocabulary (the tasks methods)."""

    method: str
    params: dict[str, Any]


def notification(method: str, params: dict[str, Any]) -> types.ServerNotification:
    # The session serializes any notification model; the cast admits the tasks methods.
    return cast(types.ServerNotification, _Notification(method=method, params=params))


class StatusFeed:
    """Every task's status events, fanned out to in-process listeners by task id."""

    def __init__(self, backend: TaskBackend) -> None:
        self._backend = backend
        self._listeners: dict[str, dict[object, Listener]] = {}
        self._stop: Callable[[], Awaitable[None]] | None = None

    async def start(self) -> None:
        self._stop = await self._backend.client.on_every_event(self._on_event)

    async def stop(self) -> None:
        if self._stop is not None:
            await self._stop()
        self._stop = None

    def _on_event(self, data: bytes) -> None:
        try:
            task_id = event_decoder.decode(data).task_id
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return
        for listener in list(self._listeners.get(task_id, {}).values()):
            listener(task_id)

    def subscribe(self, task_ids: Iterable[str], listener: Listener) -> Callable[[], None]:
        """Call `listener(task_id)` after each status event of those tasks; returns the undo."""
        token = object()
        ids = list(task_ids)
        for task_id in ids:
            self._listeners.setdefault(task_id, {})[token] = listener

        def unsubscribe() -> None:
            for task_id in ids:
                listeners = self._listeners.get(task_id, {})
                listeners.pop(token, None)
                if not listeners:
                    self._listeners.pop(task_id, None)

        return unsubscribe


@dataclass
class _Follow:
    session: ServerSession
    task_id: str
    status: str
    since: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    unsubscribe: Callable[[], None] = lambda: None


class LegacyPush:
    """`notifications/tasks/status` (2025-11-25) to sessions that created or polled a task."""

    def __init__(self, feed: StatusFeed, backend: TaskBackend) -> None:
        self._feed = feed
        self._backend = backend
        self._follows: dict[tuple[str, str], _Follow] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def follow(self, ctx: Context, task_id: str, seen: str) -> None:
        """Push the task's status changes to the session of `ctx` until the task ends.

        `seen` is the status the client was just given; a change that happened before
        the subscription is caught by one re-read right after it.
        """
        session_id = _session_id(ctx)
        if session_id is None or seen in TERMINAL_STATUSES:
            return
        self._prune()
        key = (session_id, task_id)
        if key in self._follows:
            return
        entry = _Follow(ctx.session, task_id, seen)
        entry.unsubscribe = self._feed.subscribe([task_id], lambda _: self._wake(key))
        self._follows[key] = entry
        self._wake(key)

    def _wake(self, key: tuple[str, str]) -> None:
        task = asyncio.create_task(self._push(key))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _push(self, key: tuple[str, str]) -> None:
        entry = self._follows.get(key)
        if entry is None:
            return
        async with entry.lock:
            try:
                record = await self._backend.client.get(entry.task_id)
            except TaskNotFoundError:
                return self._drop(key)
            except Exception as exc:  # NATS reconnecting: the next event tries again
                log.debug("could not read task %s: %s", entry.task_id, exc)
                return None
            status = mcp_status(record.status)
            if status != entry.status:
                entry.status = status
                task = legacy_task(record, self._backend.options.poll_interval_ms)
                try:
                    await entry.session.send_notification(
                        notification("notifications/tasks/status", task)
                    )
                except Exception as exc:  # the session is gone: stop following
                    log.debug("dropped a task status notification: %s", exc)
                    return self._drop(key)
            if record.status.is_terminal:
                self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self._follows.pop(key, None)
        if entry is not None:
            entry.unsubscribe()

    def _prune(self) -> None:
        limit = time.monotonic() - FOLLOW_LIMIT
        for key in [key for key, entry in self._follows.items() if entry.since < limit]:
            self._drop(key)

    async def stop(self) -> None:
        for key in list(self._follows):
            self._drop(key)
        for task in list(self._sending):
            task.cancel()


def _session_id(ctx: Context) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value = headers.get("mcp-session-id") if headers is not None else None
    return value if isinstance(value, str) else None


_CLOSED = ""


class TaskListen:
    """`subscriptions/listen` (2026-07-28) with `notifications.taskIds` (SEP-2663)."""

    def __init__(self, feed: StatusFeed, backend: TaskBackend) -> None:
        self._feed = feed
        self._backend = backend
        self._queues: set[asyncio.Queue[str]] = set()

    async def __call__(
        self, ctx: Context, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        requested = (params.notifications.model_extra or {}).get("taskIds")
        if requested is not None and not declares_tasks(ctx.session.client_capabilities):
            raise errors.missing_tasks_extension()
        honored = await self._known(requested, caller_of(ctx))
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._queues.add(queue)
        unsubscribe = self._feed.subscribe(honored, queue.put_nowait)
        try:
            await self._acknowledge(ctx, honored, meta)
            for task_id in honored:  # the current state first, then every change
                queue.put_nowait(task_id)
            await self._stream(ctx, queue, meta)
        finally:
            unsubscribe()
            self._queues.discard(queue)
        return types.SubscriptionsListenResult(_meta=meta)

    async def _known(self, requested: Any, caller: str | None) -> list[str]:
        """The requested task ids that exist: the ones the server agrees to report on."""
        if not isinstance(requested, list):
            return []
        known = []
        for task_id in dict.fromkeys(item for item in requested if isinstance(item, str)):
            with contextlib.suppress(Exception):
                await self._backend.record(task_id, caller)
                known.append(task_id)
        return known

    async def _acknowledge(self, ctx: Context, honored: list[str], meta: dict[str, Any]) -> None:
        extra = {"taskIds": honored} if honored else {}
        ack = types.SubscriptionsAcknowledgedNotification(
            params=types.SubscriptionsAcknowledgedNotificationParams(
                notifications=types.SubscriptionFilter.model_validate(extra), _meta=meta
            )
        )
        await ctx.session.send_notification(ack, related_request_id=ctx.request_id)

    async def _stream(self, ctx: Context, queue: asyncio.Queue[str], meta: dict[str, Any]) -> None:
        sent: dict[str, str] = {}
        poll_ms = self._backend.options.poll_interval_ms
        while (task_id := await queue.get()) != _CLOSED:
            try:
                record = await self._backend.client.get(task_id)
            except TaskNotFoundError:
                continue
            status = mcp_status(record.status)
            if sent.get(task_id) == status:
                continue
            sent[task_id] = status
            params = {**detailed_task(record, poll_ms), "_meta": meta}
            await ctx.session.send_notification(
                notification("notifications/tasks", params), related_request_id=ctx.request_id
            )

    def close(self) -> None:
        """End every listen stream gracefully (each sends its `SubscriptionsListenResult`)."""
        for queue in list(self._queues):
            queue.put_nowait(_CLOSED)
