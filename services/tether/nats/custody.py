"""Holding a long step for nothing a second, and handing a dead worker's steps on.

A step still running half a heartbeat after its delivery is *held*: its work message is
copied into `tether-workers` under `<worker>.<Nats-Msg-Id>` and only then acknowledged,
so from there on the step costs no NATS message at all. What keeps it is the worker's
beat (`BEAT_EVERY`), one put for everything the worker holds. When a worker falls silent
for `DEAD_AFTER`, a survivor claims its beat (compare-and-set), publishes each step it
held again, under a new message id and with the attempts so far in
`Tether-Prior-Attempts`, and removes the entries. The copy is stored before the
original is acknowledged, and published again before it is removed, so a step is never
in neither place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tether.errors import NatsUnavailableError, RevisionConflictError
from tether.nats.delivery import PRIOR_ATTEMPTS, Delivery
from tether.schemas.codec import encode
from tether.schemas.tasks import HeldStep, WorkerBeat
from tether.tasks.rules import utcnow

if TYPE_CHECKING:
    from tether.nats.store import Store

log = logging.getLogger("tether.worker")

BEAT_EVERY = 0.5
"""Seconds between a worker's beats: its liveness, and so that of every step it holds."""
DEAD_AFTER = 2.0
"""Seconds of silence after which a survivor hands a worker's held steps on. A worker
whose event loop is blocked this long (a tool calling blocking code) is taken for dead:
its held steps run again elsewhere, at least once as always."""
CHECK_EVERY = 0.25
REPUBLISH_EVERY = 1.0
CLOSE_WITHIN = 5.0
AT_ONCE = 512
"""Held steps a survivor hands on concurrently."""
KV_OPERATION = "KV-Operation"
_beat_decoder = msgspec.json.Decoder(WorkerBeat)
_REISSUED = re.compile(r"\.r\d+$")
_held_decoder = msgspec.json.Decoder(HeldStep)


def reissued_id(msg_id: str, attempt: int) -> str:
    """The message id of a step published again after `attempt`: the same for every
    survivor that does it (the duplicate window drops the others)."""
    return f"{_REISSUED.sub('', msg_id)}.r{attempt}"


class Custody:
    """The steps one worker holds: `hold` a delivery, then `release` or `reissue` it.

    Entries are keyed `<worker>.<Nats-Msg-Id>`."""

    def __init__(self, store: Store, worker_key: str) -> None:
        self._store = store
        self._prefix = worker_key + "."
        self._later: dict[str, tuple[asyncio.TimerHandle, HeldStep]] = {}
        """Delayed retries, by key."""
        self._publishing: set[asyncio.Task[None]] = set()
        self.holding = 0
        """Steps held now (a delayed retry included, until it is published)."""

    async def hold(self, delivery: Delivery) -> str:
        """Store the step's copy; returns its key (for `release`)."""
        held = _held(delivery)
        key = self._prefix + held.msg_id
        await self._store.workers.put_entry(key, encode(held))
        self.holding += 1
        return key

    async def release(self, key: str) -> None:
        await self._store.workers.remove_entry(key)
        self.holding -= 1

    async def reissue(self, delivery: Delivery, key: str, delay: timedelta | None) -> None:
        """Run the step again (after `delay`): publish it anew, then drop the entry. A
        delayed one waits in this process; if it dies first, a survivor publishes it."""
        held = _held(delivery)
        if delay is None or delay <= timedelta(0):
            await self._publish(held, key)
            return
        handle = asyncio.get_running_loop().call_later(delay.total_seconds(), self._fire, key)
        self._later[key] = (handle, held)

    def _fire(self, key: str) -> None:
        _, held = self._later.pop(key)
        task = asyncio.ensure_future(self._publish(held, key))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, held: HeldStep, key: str) -> None:
        """Publish again until it is done: the entry is the step's only copy."""
        while True:
            try:
                await publish_again(self._store, held)
                await self.release(key)
                return
            except Exception as exc:  # NATS away: the message id makes a repeat a no-op
                log.warning("could not publish %s again (%s); trying again", held.msg_id, exc)
                await asyncio.sleep(REPUBLISH_EVERY)

    async def close(self) -> None:
        """On a clean stop: publish the delayed retries now rather than leave them."""
        for key, (handle, _) in list(self._later.items()):
            handle.cancel()
            self._fire(key)
        if self._publishing:  # bounded: an entry left behind is a survivor's to hand on
            _, stuck = await asyncio.wait(self._publishing, timeout=CLOSE_WITHIN)
            for task in stuck:
                task.cancel()


def _held(delivery: Delivery) -> HeldStep:
    return HeldStep(
        subject=delivery.subject,
        msg_id=delivery.msg_id,
        attempt=delivery.attempt,
        work=msgspec.Raw(delivery.data),
        ack=delivery.ack_subject,
    )


async def publish_again(store: Store, held: HeldStep) -> None:
    headers = {
        "Nats-Msg-Id": reissued_id(held.msg_id, held.attempt),
        PRIOR_ATTEMPTS: str(held.attempt),
    }
    await store.publish_raw(held.subject, bytes(held.work), headers)


def _held_of(value: bytes) -> HeldStep | None:
    try:
        return _held_decoder.decode(value)
    except msgspec.DecodeError:
        log.warning("ignoring an undecodable held step: %r", value[:200])
        return None


class Succession:
    """Watches every worker's beat; hands on the steps of one that fell silent.

    Beats are followed as plain messages on `$KV.<workers bucket>.*` (a KV put is a
    publish), so watching costs no consumer. Silence is measured on this process's
    clock from the last beat it saw, so clocks need not agree between machines.
    """

    def __init__(self, store: Store, own_key: str, dead_after: float = DEAD_AFTER) -> None:
        self._store = store
        self._own = own_key
        self._dead_after = dead_after
        self._subject = store.names.kv_subject(store.names.workers_bucket)
        self._seen: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        self._subscription = await self._store.nc.subscribe(self._subject + "*", cb=self._beat)
        now = time.monotonic()
        try:
            keys = await self._store.keys(self._store.names.workers_bucket, "*")
        except NatsUnavailableError as exc:  # their beats, or their silence, tell the rest
            log.warning("could not list the workers: %s", exc)
            keys = []
        for key in keys:
            self._seen.setdefault(key, now)  # silent from here on: dead
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()

    async def _beat(self, msg: Msg) -> None:
        key = msg.subject[len(self._subject) :]
        if (msg.headers or {}).get(KV_OPERATION) in ("DEL", "PURGE"):
            self._seen.pop(key, None)
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
        keys = await store.keys(store.names.workers_bucket, key + ".>")
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
