"""Which build runs a step (pure): the decisions of `tether builds`.

A step goes to `<prefix>.work.<tool>`, which every worker of the tool takes, unless
builds must be told apart: then to `<prefix>.work.<tool>.<build>`. With one build
serving a tool, nothing is routed, so a fleet that is not mid-deploy pays nothing.

- A new task (its first step, not started yet) goes to the ramped build for the ramp's
  share of task ids, else to the current build: the promoted one, else the newest.
- A moving step goes to the current build, unless that build's tool would not take
  what the build before made (its input schema changed): then it stays on that build.
- A pinned step goes to the build that started its task while any worker of it is
  left (a draining one included); when none is, its tool's `when_gone` says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tether.deploys.compat import input_changes
from tether.schemas.builds import BuildInfo, Deployment, ToolShape
from tether.schemas.records import TaskRecord
from tether.schemas.work import WorkMessage

MOVING = ToolShape()


@dataclass
class Fleet:
    """What a process knows of the builds at one moment (see `tether.deploys.fleet`)."""

    serving: dict[str, dict[str, bool]] = field(default_factory=dict)
    """tool → build → whether a worker of it takes new work (False: all draining)."""
    infos: dict[str, BuildInfo] = field(default_factory=dict)
    deployment: Deployment = field(default_factory=Deployment)
    gone_since: dict[tuple[str, str], datetime] = field(default_factory=dict)
    """(tool, build) that no worker serves any more (or not since this view began),
    since when: a pinned step's grace runs from it."""

    def shape(self, tool: str, build: str | None) -> ToolShape:
        info = self.infos.get(build or "")
        return info.tools.get(tool, MOVING) if info is not None else MOVING

    def current(self, tool: str) -> str | None:
        """Where new tasks and moving steps of `tool` go: the promoted build if it serves
        the tool, else the newest that does (a retired build only if nothing else does)."""
        active = [b for b, takes in self.serving.get(tool, {}).items() if takes]
        if not active:
            return None
        promoted = self.deployment.current
        if promoted in active:
            return promoted
        retired = set(self.deployment.retired)
        return max(active, key=lambda build: (build not in retired, self._seen(build), build))

    def _seen(self, build: str) -> datetime:
        info = self.infos.get(build)
        return info.first_seen if info is not None else datetime.min.replace(tzinfo=UTC)

    def fits(self, tool: str, source: str, target: str) -> bool:
        """Whether `target`'s tool takes every input `source`'s tool does."""
        before, after = self.infos.get(source), self.infos.get(target)
        if before is None or after is None or tool not in before.tools or tool not in after.tools:
            return True  # nothing said: as before builds were told apart
        return not input_changes(before.tools[tool].input_schema, after.tools[tool].input_schema)

    def takes_new(self, tool: str, build: str) -> bool:
        """Whether a worker of `build` that is not draining serves `tool` (none: a draining
        worker of it is its build's last, and takes what is routed there)."""
        return bool(self.serving.get(tool, {}).get(build))


@dataclass(frozen=True)
class Refuse:
    """The step cannot run anywhere it may: fail its task with `reason`."""

    reason: str


def ramped(task_id: str, percent: float) -> bool:
    """Whether a task id falls in the ramp's share: by a hash, so every process agrees
    and a task asked about again gets the same answer."""
    digest = hashlib.blake2b(task_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 10_000 < percent * 100


def started_on(record: TaskRecord | None) -> str | None:
    """The build a task counts as started on: the one that ran its first step, or, for a
    child not started yet, the one that ran the step that started it."""
    if record is None:
        return None
    return record.build or (record.parent.build if record.parent is not None else None)


def place(
    fleet: Fleet, work: WorkMessage, started_on: str | None, now: datetime
) -> str | Refuse | None:
    """The build that runs `work` (None: any worker of its tool); `started_on`: the
    build that started its task (None: not started yet)."""
    builds = fleet.serving.get(work.tool, {})
    deployment = fleet.deployment
    if (
        len(builds) < 2
        and (started_on is None or started_on in builds)
        and not (deployment.ramp or deployment.current or deployment.retired)
    ):
        return None  # one build (or none yet), which started the task: any worker will do
    if started_on is None and work.step == 0:
        return _new_task(fleet, work)
    shape = fleet.shape(work.tool, started_on)
    if shape.versioning == "pinned" and started_on is not None:
        return _pinned(fleet, work, started_on, shape, now)
    target = fleet.current(work.tool)
    source = work.from_build
    if target is None or source is None or source == target:
        return target
    if fleet.fits(work.tool, source, target):
        return target
    # The newer build would refuse what this one made: it stays (and waits for a worker
    # of its build, when none is left, as `tether builds` shows).
    return source


def _new_task(fleet: Fleet, work: WorkMessage) -> str | None:
    deployment = fleet.deployment
    if (
        deployment.ramp is not None
        and fleet.serving.get(work.tool, {}).get(deployment.ramp)
        and ramped(work.task_id, deployment.percent)
    ):
        return deployment.ramp
    return fleet.current(work.tool)


def _pinned(
    fleet: Fleet, work: WorkMessage, started_on: str, shape: ToolShape, now: datetime
) -> str | Refuse:
    if started_on in fleet.serving.get(work.tool, {}) or shape.when_gone == "wait":
        return started_on
    gone = fleet.gone_since.get((work.tool, started_on))
    if gone is None or now - gone < timedelta(seconds=shape.grace_s):
        return started_on  # its grace is not over: it waits on its build's subject
    if shape.when_gone == "fail":
        return Refuse(
            f"task {work.task_id!r} is pinned to build {started_on!r}, which no worker of "
            f"tool {work.tool!r} has run for {shape.grace_s:g} s: start one (tether worker "
            f"--build {started_on}) and retry the task, or let its steps move "
            "(when_gone='move')"
        )
    target = fleet.current(work.tool)
    if target is None or not fleet.fits(work.tool, started_on, target):
        return started_on  # never onto a build whose tool would refuse its input
    return target
