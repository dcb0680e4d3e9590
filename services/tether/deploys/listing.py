"""`tether builds`: the builds with their workers, steps and share of new tasks."""

from __future__ import annotations

from tether.nats.store import Store
from tether.schemas.builds import BuildInfo, BuildRow, BuildsReply, BuildState, Deployment


async def listing(store: Store, said: str = "") -> BuildsReply:
    """Every build announced, oldest first, as the fleet runs it now; `said`: what the
    change asked for did."""
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
