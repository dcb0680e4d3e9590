"""Handing a dead worker's held steps on (see `custody` for holding them).

When a worker falls silent for `Liveness.dead_after`, a survivor claims its beat
(compare-and-set), publishes each step it held again, under a new message id and with
the attempts so far in `Tether-Prior-Attempts`, and removes the entries. Two survivors
may race for one worker: the compare-and-set lets exactly one win.

A late beat is a question first (`tether.nats.alive`): a worker whose beat says it
answers and is late by `Liveness.ask_after` is asked on its own subject. An answer counts
as a beat (never taken for dead, however late its beats); no answer in time is asked
again, and its silence still ends at `dead_after`. "No responders" is its death now only
when every question over `CONFIRM_S` says so (a live worker whose connection is re-made
answers, or beats, within it: it beats at once when it is back, its subscription first),
while its beat stays late, from a connection steady (`tether.nats.alive.steadiness`: no
reconnect, no unanswered call, no change in the cluster) for `SETTLE_S` before and
throughout, that stored its own beat lately, and only if no beat of it was stored since
the last one heard here (a beat this process missed).

Three rules keep a step from being lost or run twice around a failover, when no worker
can write for a while (a JetStream cluster electing a leader):
- a survivor that could not store its own beat lately judges no other worker dead (their
  beats failed as its own did);
- a claim is followed through: a hand-on that fails is tried again every round until
  every held step is published again and its entry removed, whatever the claimed worker
  writes meanwhile;
- the claimed worker stops a held step only once its entry is gone (`Worker`), that is,
  once it is certain to run elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

import msgspec

from tether.clock import utcnow
from tether.errors import NatsUnavailableError, RevisionConflictError
from tether.nats.alive import Asked, ask_alive, check_answered, serve_alive, steadiness
from tether.nats.answering import Answering
from tether.nats.connection import NatsConfig
from tether.nats.failures import disturbances
from tether.nats.store import Store
from tether.nats.workers import is_worker_key
from tether.schemas.codec import encode
from tether.schemas.workers import HeldStep, WorkerBeat
from tether.worker.custody import publish_again
from tether.worker.heartbeats import StepHeartbeat
from tether.worker.lag import LoopLag
from tether.worker.liveness import Liveness

log = logging.getLogger("tether.worker")
CHECK_EVERY = 0.05
AGAIN_AFTER = 0.05
"""Seconds between questions while the answer is "no responders", and after a question
left unanswered."""
CONFIRM_S = 0.1
"""Seconds over which every question (every `AGAIN_AFTER`) must say "no responders" before a
worker is dead now: longer than a live worker's reconnect to a server that is up takes
(4-40 ms on a loaded 2-core machine). A server that died is told of (`steadiness`)."""
SETTLE_S = 2.0
"""Seconds this process's connection is up and steady (or `dead_after`, if shorter)
before it believes a "no responders": a server just restarted, or one whose route to
another just came back, may not know yet of the subscribers on the others."""
LET_GO_FOR = 60.0
"""Seconds a worker taken for dead looks for its held steps being handed on."""
LOOK_EVERY = 0.25
"""Seconds between those looks (a read per step it holds)."""
AT_ONCE = 512
"""Held steps a survivor hands on concurrently."""
_beat_decoder = msgspec.json.Decoder(WorkerBeat)
_held_decoder = msgspec.json.Decoder(HeldStep)


def _held_of(value: bytes) -> HeldStep | None:
    try:
        return _held_decoder.decode(value)
    except msgspec.DecodeError:
        log.warning("ignoring an undecodable held step: %r", value[:200])
        return None


class Succession:
    """Watches every worker's beat; hands on the steps of one that fell silent.

    Beats are heard as they are written (`Workers.follow`), so watching costs no
    consumer. Silence is measured on this process's clock from the last beat it heard,
    so clocks need not agree between machines.
    """

    def __init__(
        self,
        store: Store,
        own_key: str,
        liveness: Liveness | None = None,
        held: Callable[[], list[StepHeartbeat]] | None = None,
        beat_stored: Callable[[], float] | None = None,
    ) -> None:
        self._store = store
        self._own = own_key
        self._held = held
        """The steps this worker holds: when another claims it (its beats came too late),
        each stops here once it is handed on (`_let_go`)."""
        self._claimed_at = -math.inf
        self._letting_go: asyncio.Task[None] | None = None
        self._beat_stored = beat_stored
        """When (monotonic) this worker's own beat was last stored."""
        self._liveness = liveness or Liveness()
        self._dead_after = self._liveness.dead_after
        self._claimed: set[str] = set()
        """Workers this one claimed whose held steps are not all handed on yet."""
        self._seen: dict[str, float] = {}
        self._beat_times: dict[str, datetime] = {}
        """The `time` of each worker's last beat heard, for those that answer questions."""
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._lingering: set[asyncio.Task[Asked]] = set()
        """Questions asked again already whose answer may still come."""
        self._steady_since = time.monotonic()
        """Since when (monotonic) this process's connection has been steady."""
        self._task: asyncio.Task[None] | None = None
        self._answering: Answering | None = None
        self.lag = LoopLag()
        self._unfollow: Callable[[], Awaitable[None]] | None = None

    async def serve(self, config: NatsConfig) -> LoopLag:
        """Answer the others' questions (`tether.nats.alive`), from a thread of their own
        (`tether.nats.answering`), until `stop`: before this worker beats or holds anything.
        Returns how late the event loop runs (answered for while it turns at all)."""
        subject = self._store.names.alive_subject(self._own)
        self.lag.start()
        await serve_alive(self._store.nc, subject)
        stall = self._liveness.loop_stall
        answering = Answering(config, subject, self._store.nc, self.lag.stalled, stall)
        try:
            await answering.start()
            self._answering = answering
        except Exception as exc:  # answered from the event loop alone, as before
            log.warning("worker %s answers from its event loop only: %s", self._own, exc)
        try:
            await check_answered(self._store.nc, subject)
        except BaseException:
            await answering.stop()
            raise
        return self.lag

    async def start(self) -> None:
        self._unfollow = await self._store.workers.follow(self._heard)
        now = time.monotonic()
        try:
            keys = [key for key in await self._store.workers.keys("*") if is_worker_key(key)]
        except NatsUnavailableError as exc:  # their beats, or their silence, tell the rest
            log.warning("could not list the workers: %s", exc)
            keys = []
        for key, silent in (await self._silences(keys)).items():
            self._seen.setdefault(key, now - silent)
        await self._read_beats([key for key in keys if key != self._own])
        self._task = asyncio.create_task(self._watch())

    async def _read_beats(self, keys: list[str]) -> None:
        """Which workers answer questions, before their next beat is heard (one that died
        just before this one started beats no more)."""
        beats = await asyncio.gather(
            *(self._store.workers.beat_of(key) for key in keys), return_exceptions=True
        )
        for key, beat in zip(keys, beats, strict=True):
            if isinstance(beat, WorkerBeat) and beat.answers and beat.claimed_by is None:
                self._beat_times.setdefault(key, beat.time)

    async def _silences(self, keys: list[str]) -> dict[str, float]:
        """How long each worker has been silent. One that died before this one started
        has been since its last beat, not since now: a replacement started after a crash
        takes its steps over `dead_after` after that beat, as a survivor would have."""
        found = dict.fromkeys(keys, 0.0)
        others = [key for key in keys if key != self._own]
        try:
            found |= await self._store.workers.silences(others, self._own)
        except Exception as exc:  # unread: silent from now on, as they were taken before
            log.debug("could not read when the workers last beat: %s", exc)
        return found

    async def stop(self) -> None:
        for task in (self._task, self._letting_go, *self._asking.values(), *self._lingering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._unfollow is not None:
            await self._unfollow()
        if self._answering is not None:
            await self._answering.stop()
        self.lag.stop()

    def _heard(self, key: str, beat: WorkerBeat | None) -> None:
        if beat is None:
            self._seen.pop(key, None)
            self._beat_times.pop(key, None)
        elif key == self._own and beat.claimed_by not in (None, self._own):
            self._taken(beat.claimed_by)
        else:
            self._seen[key] = time.monotonic()
            if beat.answers and beat.claimed_by is None:
                self._beat_times[key] = beat.time
            else:
                self._beat_times.pop(key, None)

    def _taken(self, by: str) -> None:
        log.warning(
            "worker %s was taken for dead by %s (its beats came too late): each step it "
            "holds stops here once it is handed on to run elsewhere",
            self._own,
            by,
        )
        self._claimed_at = time.monotonic()
        if self._held is not None and (self._letting_go is None or self._letting_go.done()):
            self._letting_go = asyncio.create_task(self._let_go(self._held))

    async def _let_go(self, held: Callable[[], list[StepHeartbeat]]) -> None:
        """Stop each held step once its copy is gone from custody, that is once the
        claimer has published it again (a claimer that fails tries again: until then the
        step runs on here). Looks for `LET_GO_FOR` after the last claim heard."""
        while time.monotonic() - self._claimed_at < LET_GO_FOR:
            stopped = 0
            for heartbeat in held():
                if heartbeat.handed_over:
                    continue
                with contextlib.suppress(NatsUnavailableError):  # not certain: runs on
                    if await self._store.workers.entry(heartbeat.held_key) is None:
                        heartbeat.hand_over()
                        stopped += 1
            if stopped:
                log.warning("worker %s stopped %d step(s) handed on elsewhere", self._own, stopped)
            await asyncio.sleep(LOOK_EVERY)

    async def _watch(self) -> None:
        last, disturbed, steady = time.monotonic(), self._disturbances(), self._steadiness()
        while True:
            await asyncio.sleep(CHECK_EVERY)
            now = time.monotonic()
            if (
                now - last > self._dead_after / 2
                or self._disturbances() != disturbed
                or not self._own_beat_recent(now)
            ):
                # This process was stalled, cut off from NATS, or could not store its
                # own beat: the others' silence says nothing. Start their clocks again.
                self._seen = dict.fromkeys(self._seen, now)
                self._steady_since = now
            elif self._steadiness() != steady:  # the cluster changed: interest may lag
                self._steady_since = now
            last, disturbed, steady = now, self._disturbances(), self._steadiness()
            self._ask_late(now)
            silent = [
                key
                for key, seen in self._seen.items()
                if key != self._own and now - seen > self._dead_after
            ]
            for key in [*self._claimed, *silent]:
                try:
                    await self.take_over(key, why=f"silent for {self._dead_after:g}s")
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # NATS away: the next round tries again
                    log.warning(
                        "could not hand on the steps of worker %s yet (%s); trying again",
                        key,
                        exc,
                    )

    def _ask_late(self, now: float) -> None:
        """Ask each worker that answers and is late (one question at a time each)."""
        ask_after = self._liveness.ask_after
        for key, seen in self._seen.items():
            late = ask_after < now - seen <= self._dead_after
            if late and key != self._own and key in self._beat_times and key not in self._asking:
                task = asyncio.create_task(self._question(key))
                self._asking[key] = task
                task.add_done_callback(functools.partial(self._answered, key))

    def _answered(self, key: str, _: asyncio.Task[None]) -> None:
        self._asking.pop(key, None)

    async def _question(self, key: str) -> None:
        asked_at, steady = time.monotonic(), self._steadiness()
        heard = self._beat_times.get(key)
        asked, last_asked = await self._ask(key), asked_at
        while asked is Asked.GONE and last_asked - asked_at < CONFIRM_S:
            await asyncio.sleep(AGAIN_AFTER)  # a worker that is reconnecting answers, or beats
            if self._seen.get(key, math.inf) > asked_at:
                return
            asked, last_asked = await self._ask(key), time.monotonic()
        if self._seen.get(key, math.inf) > asked_at:
            return  # it beat meanwhile (or it left)
        if asked is Asked.ALIVE:
            self._seen[key] = time.monotonic()  # as good as a beat
            return
        if asked is Asked.GONE and self._believes_gone(asked_at, steady):
            try:
                await self.take_over(key, heard, why="no responders")
                return
            except Exception as exc:  # NATS away: the beats' rule tries again (`_watch`)
                log.warning("could not hand on the steps of worker %s yet (%s)", key, exc)
        await asyncio.sleep(AGAIN_AFTER)  # then asked again, while it is late

    async def _ask(self, key: str) -> Asked:
        """One question, unsure past `ask_within`; its answer counts as a beat whenever
        it comes until `dead_after`: a worker whose event loop is slow answers late."""
        subject = self._store.names.alive_subject(key)
        question = asyncio.create_task(ask_alive(self._store.nc, subject, self._dead_after))
        done, _ = await asyncio.wait({question}, timeout=self._liveness.ask_within)
        if done:
            return question.result()
        self._lingering.add(question)
        question.add_done_callback(functools.partial(self._answered_late, key))
        return Asked.UNSURE

    def _answered_late(self, key: str, question: asyncio.Task[Asked]) -> None:
        self._lingering.discard(question)
        if not question.cancelled() and question.result() is Asked.ALIVE and key in self._seen:
            self._seen[key] = time.monotonic()

    def _believes_gone(self, asked_at: float, steady: int) -> bool:
        """Whether "no responders" is to be believed: this connection was steady for
        `SETTLE_S` before the questions and throughout, and this worker's own beat was
        stored lately (a cluster electing a leader fails every beat alike)."""
        now = time.monotonic()
        return (
            asked_at - self._steady_since >= min(SETTLE_S, self._dead_after)
            and self._steadiness() == steady
            and self._own_beat_recent(now)
        )

    def _own_beat_recent(self, now: float) -> bool:
        if self._beat_stored is None:
            return True
        return now - self._beat_stored() <= self._dead_after / 2

    def _disturbances(self) -> int:
        return disturbances(self._store.nc)

    def _steadiness(self) -> int:
        return steadiness(self._store.nc)

    async def take_over(
        self, key: str, heard: datetime | None = None, why: str = "taken over"
    ) -> int:
        """Claim a silent worker and publish again every step it held; returns how many
        (0 when another survivor claimed it first, or it came back, or it beat later than
        `heard`, the `time` of its last beat heard here). Once claimed, a call that fails
        part way is made again (`_watch`) until every step is handed on."""
        store = self._store
        if key not in self._claimed:
            found = await store.workers.entry(key)
            if found is None:
                self._seen.pop(key, None)
                return 0
            value, revision = found
            beat = _beat_decoder.decode(value)
            if heard is not None and beat.claimed_by is None and beat.time > heard:
                self._seen[key] = time.monotonic()  # a beat stored that did not reach here
                self._beat_times[key] = beat.time
                return 0
            if beat.claimed_by != self._own:  # else: claimed by this process already
                claim = msgspec.structs.replace(beat, claimed_by=self._own, time=utcnow())
                try:
                    await store.workers.put_entry(key, encode(claim), last=revision)
                except RevisionConflictError:  # it beat again, or another claimed it
                    self._seen[key] = time.monotonic()
                    return 0
            self._claimed.add(key)
        self._seen[key] = time.monotonic()  # ours now; if this process dies, another's
        count = 0
        keys = await store.workers.keys(key + ".>")
        for start in range(0, len(keys), AT_ONCE):
            batch = keys[start : start + AT_ONCE]
            count += sum(await asyncio.gather(*(self._hand_on(k) for k in batch)))
        await store.workers.remove_entry(key)
        self._claimed.discard(key)
        self._seen.pop(key, None)
        if count:
            log.warning("worker %s is gone (%s): %d of its steps run again", key, why, count)
        return count

    async def _hand_on(self, key: str) -> int:
        entry = await self._store.workers.entry(key)
        if entry is None:
            return 0  # released (its marker is still there)
        held = _held_of(entry[0])
        if held is not None:
            await publish_again(self._store, held)
            if held.ack:  # else the message may come back too, once its ack wait ends
                await self._store.acknowledge(held.ack)
        await self._store.workers.remove_entry(key)
        return int(held is not None)
