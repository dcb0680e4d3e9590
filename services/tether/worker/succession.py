"""Handing a dead worker's held steps on (see `custody` for holding them).

When a worker falls silent for `Liveness.dead_after`, a survivor claims its beat
(compare-and-set), publishes each step it held again, under a new message id and with
the attempts so far in `Tether-Prior-Attempts`, and removes the entries. Two survivors
may race for one worker: the compare-and-set lets exactly one win.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec

from tether.clock import utcnow
from tether.errors import NatsUnavailableError, RevisionConflictError
from tether.nats.store import Store
from tether.nats.workers import is_worker_key
from tether.schemas.codec import encode
from tether.schemas.tasks import HeldStep, WorkerBeat
from tether.worker.custody import publish_again
from tether.worker.liveness import Liveness

log = logging.getLogger("tether.worker")
CHECK_EVERY = 0.25
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
        taken: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._own = own_key
        self._taken = taken
        """Called with the claimer's key when another worker claims this one (its beats
        came too late): what it held runs elsewhere now."""
        self._dead_after = (liveness or Liveness()).dead_after
        self._seen: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._unfollow: Callable[[], Awaitable[None]] | None = None

    async def start(self) -> None:
        self._unfollow = await self._store.workers.follow(self._heard)
        now = time.monotonic()
        try:
            keys = await self._store.workers.keys("*")
        except NatsUnavailableError as exc:  # their beats, or their silence, tell the rest
            log.warning("could not list the workers: %s", exc)
            keys = []
        for key in filter(is_worker_key, keys):
            self._seen.setdefault(key, now)  # silent from here on: dead
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._unfollow is not None:
            await self._unfollow()

    def _heard(self, key: str, beat: WorkerBeat | None) -> None:
        if beat is None:
            self._seen.pop(key, None)
        elif key == self._own and beat.claimed_by not in (None, self._own):
            if self._taken is not None:
                self._taken(beat.claimed_by)
        else:
            self._seen[key] = time.monotonic()

    async def _watch(self) -> None:
        last, reconnects = time.monotonic(), self._reconnects()
        while True:
            await asyncio.sleep(CHECK_EVERY)
            now = time.monotonic()
            if now - last > self._dead_after / 2 or self._reconnects() != reconnects:
                # This process was stalled, or cut off from NATS: the beats it missed
                # say nothing about the others. Start their clocks again.
                self._seen = dict.fromkeys(self._seen, now)
            last, reconnects = now, self._reconnects()
            silent = [
                key
                for key, seen in self._seen.items()
                if key != self._own and now - seen > self._dead_after
            ]
            for key in silent:
                try:
                    await self.take_over(key)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # NATS away: the next round tries again
                    log.warning("could not hand on the steps of worker %s: %s", key, exc)

    def _reconnects(self) -> int:
        return int(self._store.nc.stats["reconnects"])

    async def take_over(self, key: str) -> int:
        """Claim a silent worker and publish again every step it held; returns how many
        (0 when another survivor claimed it first, or it came back)."""
        store = self._store
        found = await store.workers.entry(key)
        if found is None:
            self._seen.pop(key, None)
            return 0
        value, revision = found
        beat = _beat_decoder.decode(value)
        claim = msgspec.structs.replace(beat, claimed_by=self._own, time=utcnow())
        try:
            await store.workers.put_entry(key, encode(claim), last=revision)
        except RevisionConflictError:  # it beat again, or another survivor claimed it
            self._seen[key] = time.monotonic()
            return 0
        self._seen[key] = time.monotonic()  # ours now; if this process dies, another's
        count = 0
        keys = await store.workers.keys(key + ".>")
        for start in range(0, len(keys), AT_ONCE):
            batch = keys[start : start + AT_ONCE]
            count += sum(await asyncio.gather(*(self._hand_on(k) for k in batch)))
        await store.workers.forget(beat.worker_id)
        self._seen.pop(key, None)
        if count:
            log.warning("worker %s is gone: %d of its steps run again", beat.worker_id, count)
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
