"""Workers in `<prefix>-workers` (their beats and the steps they hold) and the running
steps' heartbeats in `<prefix>-heartbeats`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable
from datetime import timedelta

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tether.clock import utcnow
from tether.nats import headers
from tether.nats.failures import translating
from tether.nats.kv import Bucket, Entry
from tether.schemas.builds import BuildInfo, Deployment
from tether.schemas.codec import encode
from tether.schemas.names import Names
from tether.schemas.tasks import Heartbeat, StepRun, WorkerBeat

LIVE_FOR = timedelta(seconds=30)
"""A worker whose last beat is older is not listed as serving anything."""
_heartbeat_decoder = msgspec.json.Decoder(Heartbeat)
_run_decoder = msgspec.json.Decoder(StepRun)
_beat_decoder = msgspec.json.Decoder(WorkerBeat)
_info_decoder = msgspec.json.Decoder(BuildInfo)
_deployment_decoder = msgspec.json.Decoder(Deployment)
Heard = Callable[[str, WorkerBeat | None], None]
HeardBuilds = Callable[[str, BuildInfo | Deployment | None], None]


def worker_key(worker_id: str) -> str:
    """The worker's key in the workers bucket: one token (its steps are under it), which
    does not start with `_` (the builds' keys do)."""
    return re.sub(r"[^A-Za-z0-9_=-]", "_", worker_id).lstrip("_") or "worker"


def is_worker_key(key: str) -> bool:
    return not key.startswith("_")


@translating
class Workers:
    """Each worker's beat under its key, and each step it holds under `<key>.<msg id>`."""

    def __init__(self, bucket: Bucket, nc: NatsClient) -> None:
        self._bucket = bucket
        self._nc = nc

    async def follow(
        self, heard: Heard, builds: HeardBuilds | None = None
    ) -> Callable[[], Awaitable[None]]:
        """Hear every worker's beat, and its removal (`heard(key, None)`), as it is written:
        a KV put is a plain message on the key's subject, so this costs no consumer.
        `builds` hears the builds' entries (`BuildInfo`, the `Deployment`). Returns the
        stop."""
        subject = self._bucket.subject("")

        async def received(msg: Msg) -> None:
            key = msg.subject[len(subject) :]
            removed = (msg.headers or {}).get(headers.KV_OPERATION) in ("DEL", "PURGE")
            if not is_worker_key(key):
                if builds is not None:
                    builds(key, None if removed else _decode_build_entry(key, msg.data))
                return
            if removed:
                heard(key, None)
                return
            try:
                beat = _beat_decoder.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return  # not a beat: nothing a watcher can act on
            heard(key, beat)

        subscription = await self._nc.subscribe(subject + "*", cb=received)

        async def stop() -> None:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

        return stop

    async def announce(self, beat: WorkerBeat) -> None:
        """The worker's beat: alive, and serving these tools."""
        await self._bucket.put(worker_key(beat.worker_id), encode(beat))

    async def forget(self, worker_id: str) -> None:
        await self._bucket.remove(worker_key(worker_id))

    async def entry(self, key: str) -> Entry | None:
        """A beat or a held step, with its revision."""
        return await self._bucket.get(key)

    async def put_entry(self, key: str, data: bytes, last: int | None = None) -> int:
        """Write a beat or a held step (compare-and-set with `last`); its revision."""
        if last is not None:
            return await self._bucket.update(key, data, last)
        return await self._bucket.put(key, data)

    async def remove_entry(self, key: str) -> None:
        """Delete a beat or a held step with a marker that expires (a plain KV delete
        would leave one behind for every step ever held)."""
        await self._bucket.remove(key)

    async def keys(self, match: str = ">") -> list[str]:
        return await self._bucket.keys(match)

    async def beat_of(self, key: str) -> WorkerBeat | None:
        found = await self._bucket.get(key)
        return None if found is None else _beat_decoder.decode(found.value)

    async def deployment(self) -> tuple[Deployment, int | None]:
        """Where new tasks go, as the operator last said, and its revision."""
        found = await self._bucket.get(Names.DEPLOYMENT_KEY)
        if found is None:
            return Deployment(), None
        return _deployment_decoder.decode(found.value), found.revision

    async def set_deployment(self, deployment: Deployment, last: int | None) -> None:
        """Compare-and-set (create-only when `last` is None); RevisionConflictError when
        another change came first."""
        await self._bucket.update(Names.DEPLOYMENT_KEY, encode(deployment), last or 0)

    async def build(self, build: str) -> BuildInfo | None:
        found = await self._bucket.get(Names.build_key(build))
        return None if found is None else _info_decoder.decode(found.value)

    async def announce_build(self, info: BuildInfo) -> None:
        await self._bucket.put(Names.build_key(info.build), encode(info))

    async def forget_build(self, build: str) -> None:
        await self._bucket.remove(Names.build_key(build))

    async def builds(self) -> list[BuildInfo]:
        """Every build a worker announced, oldest first."""
        keys = [key for key in await self._bucket.keys("*") if key.startswith("_build_")]
        found = [await self._bucket.get(key) for key in keys]
        infos = [_info_decoder.decode(entry.value) for entry in found if entry is not None]
        return sorted(infos, key=lambda info: info.first_seen)

    async def list(self) -> list[WorkerBeat]:
        """Every worker that beat within `LIVE_FOR`, by id."""
        since = utcnow() - LIVE_FOR
        workers = []
        for key in sorted(filter(is_worker_key, await self._bucket.keys("*"))):
            beat = await self.beat_of(key)
            if beat is not None and beat.time >= since and beat.claimed_by is None:
                workers.append(beat)
        return workers


def _decode_build_entry(key: str, data: bytes) -> BuildInfo | Deployment | None:
    try:
        if key == Names.DEPLOYMENT_KEY:
            return _deployment_decoder.decode(data)
        return _info_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


@translating
class Heartbeats:
    """The running step's heartbeat per task: who runs it, and its progress."""

    def __init__(self, bucket: Bucket, workers: Workers) -> None:
        self._bucket = bucket
        self._workers = workers

    async def put(self, heartbeat: Heartbeat) -> None:
        what = f"the heartbeat of task {heartbeat.task_id!r}"
        await self._bucket.put(heartbeat.task_id, encode(heartbeat), what)

    async def run_of(
        self, task_id: str, step: int, branch: int | None
    ) -> tuple[StepRun | None, int]:
        """The step's last run (see `StepRun`), None when none was written (or it was
        unreadable: then it counts as none), and the key's revision (0: none)."""
        found = await self._bucket.get(Names.run_key(task_id, step, branch))
        if found is None:
            return None, 0
        try:
            return _run_decoder.decode(found.value), found.revision
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None, found.revision

    async def put_run(
        self, task_id: str, step: int, branch: int | None, run: StepRun, last: int | None = None
    ) -> None:
        """Write the step's run; with `last`, only if the key is still at that revision
        (RevisionConflictError: another delivery wrote it since)."""
        key, value = Names.run_key(task_id, step, branch), encode(run)
        if last is None:
            await self._bucket.put(key, value)
        else:
            await self._bucket.update(key, value, last)

    async def get(self, task_id: str) -> Heartbeat | None:
        """The running step's heartbeat, its `time` the last beat of the worker that
        holds it (a held step writes its own only once, and on progress)."""
        found = await self._bucket.get(task_id)
        if found is None:
            return None
        heartbeat = _heartbeat_decoder.decode(found.value)
        beat = await self._workers.beat_of(worker_key(heartbeat.worker_id))
        if beat is not None and beat.claimed_by is None and beat.time > heartbeat.time:
            return msgspec.structs.replace(heartbeat, time=beat.time)
        return heartbeat
