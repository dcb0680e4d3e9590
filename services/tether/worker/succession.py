"""Handing a dead worker's held steps on (see `custody` for holding them).

When a worker falls silent for `Liveness.dead_after`, a survivor claims its beat
(compare-and-set), publishes each step it held again, under a new message id and with
the attempts so far in `Tether-Prior-Attempts`, and removes the entries. Two survivors
may race for one worker: the compare-and-set lets exactly one win.

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
import logging
import math
import time
from collections.abc import Awaitable, Callable

import msgspec

from tether.clock import utcnow
from tether.errors import NatsUnavailableError, RevisionConflictError
from tether.nats.failures import disturbances
from tether.nats.store import Store
from tether.nats.workers import is_worker_key
from tether.schemas.codec import encode
from tether.schemas.workers import HeldStep, WorkerBeat
from tether.worker.custody import publish_again
from tether.worker.heartbeats import StepHeartbeat
from tether.worker.liveness import Liveness

log = logging.getLogger("tether.worker")
CHECK_EVERY = 0.25
LET_GO_FOR = 60.0
"""Seconds a worker taken for dead looks for its held steps being handed on."""
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
        self._dead_after = (liveness or Liveness()).dead_after
        self._claimed: set[str] = set()
        """Workers this one claimed whose held steps are not all handed on yet."""
        self._seen: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._unfollow: Callable[[], Awaitable[None]] | None = None

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
        self._task = asyncio.create_task(self._watch())

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
        for task in (self._task, self._letting_go):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._unfollow is not None:
            await self._unfollow()

    def _heard(self, key: str, beat: WorkerBeat | None) -> None:
        if beat is None:
            self._seen.pop(key, None)
        elif key == self._own and beat.claimed_by not in (None, self._own):
            self._taken(beat.claimed_by)
        else:
            self._seen[key] = time.monotonic()

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
            await asyncio.sleep(CHECK_EVERY)

    async def _watch(self) -> None:
        last, disturbed = time.monotonic(), self._disturbances()
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
            last, disturbed = now, self._disturbances()
            silent = [
                key
                for key, seen in self._seen.items()
                if key != self._own and now - seen > self._dead_after
            ]
            for key in [*self._claimed, *silent]:
                try:
                    await self.take_over(key)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # NATS away: the next round tries again
                    log.warning(
                        "could not hand on the steps of worker %s yet (%s); trying again",
                        key,
                        exc,
                    )

    def _own_beat_recent(self, now: float) -> bool:
        if self._beat_stored is None:
            return True
        return now - self._beat_stored() <= self._dead_after / 2

    def _disturbances(self) -> int:
        return disturbances(self._store.nc)

    async def take_over(self, key: str) -> int:
        """Claim a silent worker and publish again every step it held; returns how many
        (0 when another survivor claimed it first, or it came back). Once claimed, a call
        that fails part way is made again (`_watch`) until every step is handed on."""
        store = self._store
        if key not in self._claimed:
            found = await store.workers.entry(key)
            if found is None:
                self._seen.pop(key, None)
                return 0
            value, revision = found
            beat = _beat_decoder.decode(value)
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
            log.warning("worker %s is gone: %d of its steps run again", key, count)
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
