"""Holding a long step for nothing a second (see `succession` for handing it on).

A step still running half a heartbeat after its delivery is *held*: its work message is
copied into `tether-workers` under `<worker>.<Nats-Msg-Id>` and only then acknowledged,
so from there on the step costs no NATS message at all. What keeps it is the worker's
beat (`Liveness.beat_every`), one put for everything the worker holds. The copy is
stored before the original is acknowledged, and published again before it is removed,
so a step is never in neither place.
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import timedelta

import msgspec

from tether.nats import headers
from tether.nats.delivery import Delivery
from tether.nats.store import Store
from tether.schemas.codec import encode
from tether.schemas.workers import HeldStep

log = logging.getLogger("tether.worker")

REPUBLISH_EVERY = 1.0
CLOSE_WITHIN = 5.0
_REISSUED = re.compile(r"\.r\d+$")


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

    def forget(self, key: str) -> None:
        """The entry is a survivor's now (this worker was taken for dead): leave it."""
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
    sent = {
        headers.MSG_ID: reissued_id(held.msg_id, held.attempt),
        headers.PRIOR_ATTEMPTS: str(held.attempt),
    }
    await store.publish_raw(held.subject, bytes(held.work), sent)
