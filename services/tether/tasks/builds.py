"""`tether builds`: list the builds with their workers and steps, and change where tasks
go (ramp, promote, rollback) by compare-and-set on the `Deployment`; every worker hears
the change as it is written (`tether.worker.fleet`), so it holds within a second."""

from __future__ import annotations

from collections.abc import Callable

from tether.clock import utcnow
from tether.errors import RevisionConflictError, TaskConflictError
from tether.nats.store import Store
from tether.schemas.builds import (
    BuildInfo,
    BuildRow,
    BuildsReply,
    BuildsRequest,
    BuildState,
    Deployment,
)


async def builds(store: Store, request: BuildsRequest | None = None) -> BuildsReply:
    """Answer a `BuildsRequest`: the list, after the change it asks for (if any)."""
    request = request or BuildsRequest()
    said = ""
    if request.action != "list":
        if not request.build:
            raise ValueError(f"builds {request.action} needs a build")
        said = await _change(store, request)
    return await _listing(store, said)


async def _listing(store: Store, said: str) -> BuildsReply:
    infos = await store.workers.builds()
    deployment, _ = await store.workers.deployment()
    beats = await store.workers.list()
    routed: dict[str, int] = {}
    for (_, build), count in (await store.routed_steps()).items():
        routed[build] = routed.get(build, 0) + count
    rows = []
    current = _current(infos, deployment, {b.build for b in beats if b.build and not b.draining})
    for info in infos:
        mine = [beat for beat in beats if beat.build == info.build]
        share = 0.0
        if info.build == deployment.ramp:
            share = deployment.percent
        elif info.build == current:
            share = 100.0 - (deployment.percent if deployment.ramp else 0.0)
        rows.append(
            BuildRow(
                build=info.build,
                first_seen=info.first_seen,
                workers=len(mine),
                draining=sum(beat.draining for beat in mine),
                running=sum(beat.in_flight for beat in mine),
                routed=routed.get(info.build, 0),
                share=share,
                state=_state(info.build, current, deployment, bool(mine)),
                tools=sorted(info.tools),
                before=info.before,
                changes=info.changes,
            )
        )
    return BuildsReply(builds=rows, deployment=deployment, said=said)


def _current(infos: list[BuildInfo], deployment: Deployment, up: set[str]) -> str | None:
    if deployment.current in up:
        return deployment.current
    live = [i.build for i in infos if i.build in up and i.build not in deployment.retired]
    return live[-1] if live else None


def _state(build: str, current: str | None, deployment: Deployment, up: bool) -> BuildState:
    if build in deployment.retired:
        return "retired"
    if build == deployment.ramp:
        return "ramp"
    if build == current:
        return "current"
    return "" if up else "old"


async def _change(store: Store, request: BuildsRequest) -> str:
    build = request.build or ""
    infos = await store.workers.builds()
    known = [info.build for info in infos]
    if build not in known:
        raise TaskConflictError(
            build,
            f"no worker has announced build {build!r}: start one (tether worker --build "
            f"{build}) first; builds known: {', '.join(known) or 'none'}",
        )
    if request.action == "ramp" and not 0 <= request.percent <= 100:
        raise ValueError(f"a ramp is a percentage from 0 to 100, not {request.percent}")
    before = _previous(known, build)
    change: Callable[[Deployment], Deployment]
    if request.action == "ramp":

        def change(d: Deployment) -> Deployment:
            stays = d.current if d.current not in (None, build) else before
            retired = [b for b in d.retired if b != build]
            return Deployment(current=stays, ramp=build, percent=request.percent, retired=retired)

        rest = before or "the newest build"
        said = f"{request.percent:g}% of new tasks go to {build}; the rest to {rest}"
    elif request.action == "promote":

        def change(d: Deployment) -> Deployment:
            return Deployment(current=build, retired=[b for b in d.retired if b != build])

        said = f"new tasks and moving steps go to {build}"
    else:

        def change(d: Deployment) -> Deployment:
            back = d.current if d.current not in (None, build) else before
            retired = sorted({*d.retired, build})
            return Deployment(current=back, retired=retired)

        said = (
            f"new tasks and moving steps go to {before or 'the newest other build'} now; "
            f"tasks pinned to {build} stay on it while its workers run (stop them, and "
            "their pinned steps wait, move or fail as their tools say: when_gone)"
        )
    await _swap(store, change)
    return said


def _previous(known: list[str], build: str) -> str | None:
    """The build announced before `build` (the builds are oldest first)."""
    index = known.index(build)
    return known[index - 1] if index > 0 else None


async def _swap(store: Store, change: Callable[[Deployment], Deployment]) -> Deployment:
    for _ in range(10):
        deployment, revision = await store.workers.deployment()
        changed = change(deployment)
        changed = Deployment(
            current=changed.current,
            ramp=changed.ramp,
            percent=changed.percent,
            retired=changed.retired,
            updated_at=utcnow(),
        )
        try:
            await store.workers.set_deployment(changed, revision)
            return changed
        except RevisionConflictError:
            continue  # another change came first: apply this one to it
    raise TaskConflictError("deployment", "the deployment changed ten times meanwhile: try again")
