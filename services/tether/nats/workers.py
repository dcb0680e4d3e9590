"""Workers in `<prefix>-workers` (their beats, the steps they hold, the `Deployment`), the
builds they announced in `<prefix>-builds`, and the running steps' heartbeats in
`<prefix>-heartbeats`."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tether.clock import utcnow
from tether.errors import TetherError
from tether.nats import headers
from tether.nats.alive import Asked, ask_alive
from tether.nats.connection import jetstream_context
from tether.nats.failures import translating
from tether.nats.kv import Bucket, Entry
from tether.schemas.builds import BuildInfo, BuildTool, Deployment
from tether.schemas.codec import encode
from tether.schemas.names import Names
from tether.schemas.runs import StepRun
from tether.schemas.workers import Heartbeat, WorkerBeat

log = logging.getLogger("tether.nats")
ALIVE_WITHIN = timedelta(seconds=3)
"""A worker whose last beat is younger is alive (beats come every `beat_every`, under the
default 2 s `dead_after`)."""
ASK_WITHIN = 0.5
"""Seconds `alive` waits for a late worker's answer (it answers from a thread of its own)."""
LIVE_FOR = timedelta(seconds=30)
"""A worker whose last beat is older is not listed as serving anything."""
_heartbeat_decoder = msgspec.json.Decoder(Heartbeat)
_run_decoder = msgspec.json.Decoder(StepRun)
_beat_decoder = msgspec.json.Decoder(WorkerBeat)
_build_tool_decoder = msgspec.json.Decoder(BuildTool)
_deployment_decoder = msgspec.json.Decoder(Deployment)
Heard = Callable[[str, WorkerBeat | None], None]
HeardBuilds = Callable[[str, BuildInfo | Deployment | None], None]


def worker_key(worker_id: str) -> str:
    """The worker's key in the workers bucket: one token (its steps are under it), which
    does not start with `_` (the `Deployment`'s does)."""
    return re.sub(r"[^A-Za-z0-9_=-]", "_", worker_id).lstrip("_") or "worker"


def is_worker_key(key: str) -> bool:
    return not key.startswith("_")


@translating
class Workers:
    """Each worker's beat under its key, and each step it holds under `<key>.<msg id>`;
    the `Deployment` beside them, and each build's tools (`BuildTool` under `<build>.<tool>`)
    in a bucket of its own whose keys are written once (`layout.builds_stream_config`)."""

    def __init__(self, bucket: Bucket, nc: NatsClient, builds: Bucket) -> None:
        self._bucket = bucket
        self._nc = nc
        self._builds = builds

    async def follow(
        self, heard: Heard, builds: HeardBuilds | None = None
    ) -> Callable[[], Awaitable[None]]:
        """Hear every worker's beat, and its removal (`heard(key, None)`), as it is written:
        a KV put is a plain message on the key's subject, so this costs no consumer.
        `builds` hears the `Deployment`, and a build's `BuildInfo` whenever one of its
        tools is added (read again whole: a key alone is one tool). Returns the stop."""
        subject = self._bucket.subject("")

        async def received(msg: Msg) -> None:
            key = msg.subject[len(subject) :]
            removed = (msg.headers or {}).get(headers.KV_OPERATION) in ("DEL", "PURGE")
            if not is_worker_key(key):
                if builds is not None and key == Names.DEPLOYMENT_KEY:
                    builds(key, None if removed else _decode_deployment(msg.data))
                return
            if removed:
                heard(key, None)
                return
            try:
                beat = _beat_decoder.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return  # not a beat: nothing a watcher can act on
            heard(key, beat)

        subscriptions = [await self._nc.subscribe(subject + "*", cb=received)]
        if builds is not None:
            announced = self._builds.subject("")

            async def heard_build(msg: Msg) -> None:
                key = msg.subject[len(announced) :]
                try:
                    info = await self.build(Names.build_of_key(key))
                except TetherError as exc:  # NATS away: a later tool or a restart says it
                    log.warning("could not read build %s after it changed: %s", key, exc)
                    return
                builds(key, info)

            subscriptions.append(await self._nc.subscribe(announced + ">", cb=heard_build))

        async def stop() -> None:
            for subscription in subscriptions:
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

    async def silences(self, keys: Iterable[str], own: str) -> dict[str, float]:
        """Seconds since each of `keys` was last written, by the server's clock: against
        the write of `own` (this worker's beat, just stored), so no two machines' clocks
        are compared."""
        now = await self._bucket.written_at(own)
        if now is None:
            return {}
        silent = {}
        for key in keys:
            last = await self._bucket.written_at(key)
            if last is not None:
                silent[key] = max(0.0, (now - last).total_seconds())
        return silent

    async def keys(self, match: str = ">") -> list[str]:
        return await self._bucket.keys(match)

    async def alive(self, worker_id: str, asking: str | None = None) -> bool:
        """Whether no survivor claimed the worker and it beat within `ALIVE_WITHIN`, or,
        its beat later (its event loop busy), it answers a question on `asking` (its
        alive subject: `tether.nats.alive`)."""
        beat = await self.beat_of(worker_key(worker_id))
        if beat is None or beat.claimed_by is not None:
            return False
        if utcnow() - beat.time < ALIVE_WITHIN:
            return True
        if asking is None or not beat.answers:
            return False
        return await ask_alive(self._nc, asking, ASK_WITHIN) is Asked.ALIVE

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
        """The build as its keys describe it (None: no worker of it announced a tool)."""
        return BuildInfo.of(await self._build_tools(Names.build_keys(build)))

    async def build_tool(self, build: str, tool: str) -> BuildTool | None:
        found = await self._builds.get(Names.build_key(build, tool))
        return None if found is None else _decode_build_tool(found.value)

    async def create_build_tool(self, entry: BuildTool) -> BuildTool | None:
        """Add a tool to its build if the build has none of that name: None when written,
        else the one written first (never replaced: the server refuses a second write)."""
        key = Names.build_key(entry.build, entry.tool)
        while await self._builds.create(key, encode(entry)) is None:
            there = await self.build_tool(entry.build, entry.tool)
            if there is not None:
                return there
            # forgotten (`tether gc`) between the create and the read: create it again
        return None

    async def forget_build(self, build: str) -> None:
        """Purge the build's keys (`<build>.*`), which frees them (a delete marker would be
        a second write, refused): a stream admin's right, not a worker's."""
        stream = Names.kv_stream(self._builds.name)
        subject = self._builds.subject(Names.build_keys(build))
        await jetstream_context(self._nc).purge_stream(stream, subject=subject)

    async def builds(self) -> list[BuildInfo]:
        """Every build a worker announced, oldest first."""
        tools: dict[str, list[BuildTool]] = {}
        for entry in await self._build_tools(Names.build_keys()):
            tools.setdefault(entry.build, []).append(entry)
        infos = [info for keys in tools.values() if (info := BuildInfo.of(keys)) is not None]
        return sorted(infos, key=lambda info: info.first_seen)

    async def _build_tools(self, pattern: str) -> list[BuildTool]:
        """The keys that match, each a `BuildTool` of the build and tool its key names
        (any other value is no tool of that build, whoever wrote it)."""
        tools = []
        for key in await self._builds.keys(pattern):
            found = await self._builds.get(key)
            entry = None if found is None else _decode_build_tool(found.value)
            if entry is not None and Names.build_key(entry.build, entry.tool) == key:
                tools.append(entry)
        return tools

    async def list(self) -> list[WorkerBeat]:
        """Every worker that beat within `LIVE_FOR`, by id."""
        since = utcnow() - LIVE_FOR
        workers = []
        for key in sorted(filter(is_worker_key, await self._bucket.keys("*"))):
            beat = await self.beat_of(key)
            if beat is not None and beat.time >= since and beat.claimed_by is None:
                workers.append(beat)
        return workers


def _decode_deployment(data: bytes) -> Deployment | None:
    try:
        return _deployment_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _decode_build_tool(data: bytes) -> BuildTool | None:
    """None for what is no `BuildTool` (the server keeps anything a permitted user sent)."""
    try:
        return _build_tool_decoder.decode(data)
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
    ) -> int:
        """Write the step's run; with `last`, only if the key is still at that revision
        (RevisionConflictError: another delivery wrote it since). Its new revision."""
        key, value = Names.run_key(task_id, step, branch), encode(run)
        if last is None:
            return await self._bucket.put(key, value)
        return await self._bucket.update(key, value, last)

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
