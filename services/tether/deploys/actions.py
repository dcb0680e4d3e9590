"""`tether builds ramp|promote|rollback`: the operator's actions, which change where tasks
go by compare-and-set on the `Deployment`; every worker hears the change as it is written
(`tether.deploys.fleet`), so it holds within a second."""

from __future__ import annotations

from collections.abc import Callable

from tether.clock import utcnow
from tether.deploys.listing import listing
from tether.errors import RevisionConflictError, TaskConflictError
from tether.nats.store import Store
from tether.schemas.builds import BuildsReply, BuildsRequest, Deployment


async def answer(store: Store, request: BuildsRequest | None = None) -> BuildsReply:
    """Answer a `BuildsRequest`: the list, after the change it asks for (if any)."""
    request = request or BuildsRequest()
    said = ""
    if request.action != "list":
        if not request.build:
            raise ValueError(f"builds {request.action} needs a build")
        said = await _change(store, request)
    return await listing(store, said)


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
