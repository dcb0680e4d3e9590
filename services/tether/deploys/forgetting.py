"""Which builds `tether gc` forgets: announced over the retention ago, run by no worker,
started no unfinished task, and where no new task goes."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tether.nats.workers import Workers


async def unused_builds(
    workers: Workers, started_on: Iterable[str | None], before: datetime
) -> list[str]:
    """The builds first seen before `before` that none of the above keeps (`started_on`:
    the builds that started the unfinished tasks)."""
    deployment, _ = await workers.deployment()
    keep = {*started_on, deployment.current, deployment.ramp}
    keep |= {beat.build for beat in await workers.list()}
    return [
        info.build
        for info in await workers.builds()
        if info.first_seen < before and info.build not in keep
    ]
