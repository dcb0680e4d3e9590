"""Tether's durable state on JetStream: task records, checkpoints, workers, tools, events,
work, dead letters.

Everything that reads or writes that state goes through a `Store`: its buckets
(`records`, `checkpoints`, `workers`, `heartbeats`, `tools`, over the one key-value
primitive of `kv`) and the streams it publishes to, so the rules of each object
(create-only checkpoints, compare-and-set records, `Nats-Msg-Id` on work) hold in one
place.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext

from tether.errors import NatsUnavailableError
from tether.nats import headers
from tether.nats.blobs import Blobs
from tether.nats.checkpoints import Checkpoints
from tether.nats.connection import jetstream_context
from tether.nats.consumers import (
    ConsumerOptions,
    ensure_dispatcher_consumer,
    ensure_schedules_consumer,
    ensure_timers_consumer,
    ensure_tool_consumer,
)
from tether.nats.delivery import Consumer
from tether.nats.failures import disturbances, translating
from tether.nats.inbox import Inbox
from tether.nats.jetstream import Headers, JetStream
from tether.nats.kv import Bucket
from tether.nats.layout import Layout
from tether.nats.limits import check_message, max_value
from tether.nats.provision import open_installation
from tether.nats.recent import RecentRecords
from tether.nats.records import Records
from tether.nats.schedules import TimerRequest, request_headers, schedule_headers
from tether.nats.sessions import Sessions
from tether.nats.submissions import Submissions
from tether.nats.tools import Tools
from tether.nats.workers import Heartbeats, Workers
from tether.schemas.codec import encode
from tether.schemas.events import (
    AnyStatusEvent,
    Cancelled,
    Completed,
    Failed,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
)
from tether.schemas.names import Names, build_of_token
from tether.schemas.plans import TaskSubmit
from tether.schemas.work import DeadLetter, Timer, TokenChunk, WorkMessage

_PROGRESS_EVENTS = (Submitted, StepStarted, StepCompleted, StepRetrying)


class Observer(Protocol):
    """Told what this process writes (`tether.metrics.Metrics`)."""

    def observe(self, event: AnyStatusEvent) -> None: ...
    def dead_lettered(self, letter: DeadLetter) -> None: ...


@translating
class Store:
    def __init__(
        self, nc: NatsClient, js: JetStreamContext, names: Names, jetstream: JetStream
    ) -> None:
        self.nc = nc
        self.js = js
        self.names = names
        self._jetstream = jetstream
        self.records: Records
        self.checkpoints: Checkpoints
        self.workers: Workers
        self.heartbeats: Heartbeats
        self.tools: Tools
        self.blobs: Blobs
        self.submissions: Submissions
        self.inbox: Inbox
        self.sessions: Sessions
        self.observer: Observer | None = None

    @classmethod
    async def open(
        cls, nc: NatsClient, layout: Layout | None = None, provision: bool = True
    ) -> Store:
        """Bind to Tether's buckets; with `provision`, create (idempotently) what is
        missing first, else raise NotProvisionedError naming it."""
        layout = layout or Layout()
        js = jetstream_context(nc)
        names = layout.names
        try:
            await open_installation(js, layout, provision)
        except NoRespondersError as exc:
            raise NatsUnavailableError(
                "the NATS server has no JetStream: start it with JetStream enabled (-js)"
            ) from exc
        jetstream = JetStream(nc, names)
        await jetstream.start()
        info = await js.stream_info(names.kv_stream(names.tasks_bucket))
        direct = bool(info.config.allow_direct)

        async def bucket(name: str) -> Bucket:
            return Bucket(jetstream, await js.key_value(name), name, direct)

        store = cls(nc, js, names, jetstream)
        store.records = Records(jetstream, await bucket(names.tasks_bucket), layout.index_tasks)
        store.checkpoints = Checkpoints(await bucket(names.checkpoints_bucket), names)
        store.workers = Workers(
            await bucket(names.workers_bucket), nc, await bucket(names.builds_bucket)
        )
        store.heartbeats = Heartbeats(await bucket(names.heartbeats_bucket), store.workers)
        store.tools = Tools(await bucket(names.tools_bucket), names, js)
        store.submissions = Submissions(js, names)
        store.inbox = Inbox(js, jetstream, names)
        sessions = await bucket(names.sessions_bucket)
        store.sessions = Sessions(nc, js, jetstream, sessions)
        blobs = names.blobs_bucket
        store.blobs = Blobs(js, await js.object_store(blobs), blobs, layout.blob_threshold)
        return store

    async def tool_consumer(
        self, tool: str, options: ConsumerOptions, build: str | None = None
    ) -> Consumer:
        """The durable pull consumer of a tool's work (of the work routed to `build`),
        created or updated, then bound."""
        await ensure_tool_consumer(self.js, tool, options, self.names, build)
        durable = self.names.tool_consumer(tool, build)
        acks = self._jetstream.acks  # a step's ack goes with the worker's next write
        return await Consumer.bind(self.js, self.names.work_stream, durable, acks)

    async def routed_steps(self) -> dict[tuple[str, str], int]:
        """How many steps wait on each tool's subject of each build, by (tool, build):
        one request (see `Names.work_subject`)."""
        pattern = self.names.work_subject("*", "*")
        counts = await self._jetstream.subject_counts(self.names.work_stream, pattern)
        routed: dict[tuple[str, str], int] = {}
        for subject, count in counts.items():
            tool, token = subject.rsplit(".", 2)[-2:]
            routed[(tool, build_of_token(token))] = count
        return routed

    async def work_sequence(self) -> int:
        """The sequence of the last message stored in the work stream."""
        return await self._jetstream.last_sequence(self.names.work_stream)

    async def shared_steps_handled(self, tool: str, sequence: int) -> bool:
        """Whether every step stored on `tool`'s shared subject up to `sequence` was
        taken and acknowledged (run, or sent on to its build)."""
        durable = self.names.tool_consumer(tool)
        state = await self._jetstream.consumer_state(self.names.work_stream, durable)
        return state.handled_through(sequence)

    async def submit_consumer(self) -> Consumer:
        """The dispatchers' shared consumer of submissions."""
        await ensure_dispatcher_consumer(self.js, self.names)
        names = self.names
        return await Consumer.bind(self.js, names.submit_stream, names.dispatcher_consumer)

    async def timers_consumer(self) -> Consumer:
        """The dispatchers' shared consumer of fired timers."""
        await ensure_timers_consumer(self.js, self.names)
        return await Consumer.bind(self.js, self.names.timers_stream, self.names.timers_consumer)

    async def schedules_consumer(self) -> Consumer:
        """The dispatchers' shared consumer of timer requests."""
        await ensure_schedules_consumer(self.js, self.names)
        names = self.names
        return await Consumer.bind(self.js, names.work_stream, names.schedules_consumer)

    async def remember_records(self, on_cancel: Callable[[str], None]) -> None:
        """Keep the records this store writes (see `RecentRecords`) and follow the
        cancellation notices that invalidate them; `on_cancel` hears each one too."""
        recent = self.records.recent = RecentRecords(lambda: disturbances(self.nc))
        prefix = len(self.names.cancel_notice_subject(""))

        async def cancelled(msg: Msg) -> None:
            task_id = msg.subject[prefix:]
            recent.forget(task_id)
            on_cancel(task_id)

        await self.nc.subscribe(self.names.cancel_notice_subject("*"), cb=cancelled)

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts, headers included."""
        return int(self.nc.max_payload)

    @property
    def max_value(self) -> int:
        """The largest record, checkpoint or memo this store writes (see `limits`)."""
        return max_value(self.nc.max_payload)

    async def answers(self, subject: str, timeout: float) -> bool:
        """Whether anyone replies to a request on `subject` within `timeout`."""
        try:
            await self.nc.request(subject, b"", timeout=timeout)
        except (NoRespondersError, NatsTimeoutError):
            return False
        return True

    async def notify_cancelled(self, task_id: str) -> None:
        """Tell every worker at once (core NATS) that a task was cancelled."""
        await self.nc.publish(self.names.cancel_notice_subject(task_id))

    async def keys(self, bucket: str, match: str = ">") -> list[str]:
        """The keys in a bucket that `match` (see `Bucket.keys`)."""
        prefix = self.names.kv_subject(bucket)
        subjects = await self._jetstream.subjects(self.names.kv_stream(bucket), prefix + match)
        return [subject[len(prefix) :] for subject in subjects]

    # -- streams -------------------------------------------------------------
    async def publish_work(
        self, work: WorkMessage, msg_id: str, at: datetime | None = None, build: str | None = None
    ) -> bool:
        """Hand a step to its tool's consumer (`build`'s, when routed); False when the
        server saw `msg_id` already.

        `at`: not before then. The message waits as a timer named by `msg_id` (see
        `tether.nats.schedules`), which the server stores like any message (so it
        survives a restart) and a dispatcher hands to the work subject on time; a
        replayed hand-off replaces the timer of the same message, so it cannot wake the
        task twice.
        """
        target = self.names.work_subject(work.tool, build)
        if at is None:
            ack = await self._jetstream.publish(target, encode(work), {headers.MSG_ID: msg_id})
            return not ack.duplicate
        await self._request_timer(msg_id, encode(work), at, wake=target)
        return True

    async def set_timer(self, timer_id: str, timer: Timer, at: datetime) -> None:
        """Fire `timer` for the dispatchers at `at`; setting it again replaces it."""
        await self._request_timer(timer_id, encode(timer), at)

    async def _request_timer(
        self, timer_id: str, data: bytes, at: datetime, wake: str | None = None
    ) -> None:
        """Ask the dispatchers for a timer (see `tether.nats.schedules`). No message id:
        a request again replaces the schedule, as setting a timer again should."""
        sent = request_headers(timer_id, at, wake)
        await self._jetstream.publish(self.names.schedule_subject, data, sent)

    async def schedule(self, request: TimerRequest, data: bytes) -> None:
        """Store a requested timer as a schedule in the timers stream (the dispatchers')."""
        names = self.names
        sent = schedule_headers(request.at, names.fired_subject(request.timer_id))
        if request.wake is not None:
            sent[headers.WAKE] = request.wake  # kept on the message the schedule fires
        await self._jetstream.publish(names.timer_subject(request.timer_id), data, sent)

    async def publish_event(
        self, event: AnyStatusEvent, n: int = 0, msg_id: str | None = None
    ) -> None:
        """Publish a status event; its `Nats-Msg-Id` makes a replayed step's events no-ops.

        Events that end or pause a task wait for JetStream's acknowledgement. Progress
        events are published without waiting: the stream still stores them, in order,
        and the task record, not the event log, is what the protocol relies on.
        """
        msg_id = msg_id or self.names.event_msg_id(
            event.task_id, event.kind, event.step, event.generation, n, event.branch
        )
        subject = self.names.status_subject(event.task_id)
        sent = {headers.MSG_ID: msg_id}
        data = encode(event)
        if self.observer is not None:
            self.observer.observe(event)
        if isinstance(event, _PROGRESS_EVENTS):
            check_message(subject, data, sent, self.nc.max_payload)
            await self._jetstream.acks.send()
            await self.nc.publish(subject, data, headers=sent)
        else:
            await self._jetstream.publish(subject, data, sent)
            if isinstance(event, Failed) or (
                isinstance(event, Completed | Cancelled) and event.branch is None
            ):
                # Who waits for the end hears this alone, filtered by the server, at the
                # cost of one core message per task (not stored: a waiter reads the record).
                # A branch's `failed` fails its task.
                await self.nc.publish(self.names.ended_subject(event.task_id, event.kind))

    async def publish_token(self, chunk: TokenChunk) -> None:
        """Publish a piece of streamed text; an attempt's last one waits for its ack, so
        every chunk before it (same connection, same order) is stored when it returns."""
        subject = self.names.tokens_subject(chunk.task_id)
        if chunk.done:
            await self._jetstream.publish(subject, encode(chunk))
        else:
            await self.nc.publish(subject, encode(chunk))

    async def publish_submit(self, submit: TaskSubmit, extra: Headers = None) -> bool:
        """Queue a submission for the dispatcher; False when its id was seen in the window.
        `extra`: more headers (the submitter's trace context)."""
        data = encode(submit)  # the client checks the size first; `publish` the exact limit
        sent = {**(extra or {}), headers.MSG_ID: submit.task_id}
        subject = self.names.submit_subject(submit.task_id)
        ack = await self._jetstream.publish(subject, data, sent)
        return not ack.duplicate

    async def dead_letter(self, letter: DeadLetter) -> None:
        subject = self.names.dead_letter_subject(letter.tool)
        await self._jetstream.publish(subject, encode(letter))
        if self.observer is not None:
            self.observer.dead_lettered(letter)

    async def finish_writes(self, within: float = 5.0) -> None:
        """Before the connection closes: give the index rows being moved up to `within`
        seconds, send the acks still waiting for a write (see `tether.nats.acks`), flush."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.records.settled(), within)
        await self._jetstream.acks.close()
        await self.nc.flush(timeout=1)

    async def acknowledge(self, ack_subject: str) -> None:
        """Acknowledge a message another process received (its holder died)."""
        await self.nc.publish(ack_subject, b"+ACK")

    async def publish_raw(self, subject: str, data: bytes, sent: dict[str, str]) -> bool:
        """Publish an encoded message (a held step again); False for a duplicate id."""
        return not (await self._jetstream.publish(subject, data, sent)).duplicate
