"""Whether a plan's tools are served: checked against the tools workers advertise."""

from __future__ import annotations

import time
from collections.abc import Collection
from datetime import datetime, timedelta

from tether.clock import utcnow
from tether.errors import InvalidTaskError
from tether.nats.store import Store
from tether.schemas.plans import StepSpec
from tether.schemas.workers import ToolInfo
from tether.tasks import plans

KNOWN_TOOL_TTL = 30.0
FORGET_AFTER = timedelta(days=1)
"""A tool no live worker serves stops being known this long after it was registered."""


def served(info: ToolInfo, live: Collection[str], now: datetime) -> bool:
    """Whether a registered tool still counts as served: a live worker lists it, or one
    registered it less than `FORGET_AFTER` ago (a worker restarting, or one that does
    not beat, such as an older version or another language's)."""
    return info.name in live or now - info.updated_at < FORGET_AFTER


async def live_tools(store: Store) -> set[str]:
    """The tools the workers that beat right now serve."""
    return {tool for worker in await store.workers.list() for tool in worker.tools}


class KnownTools:
    """Remembers tools found in the registry for a while, so a submit costs no lookup."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._until: dict[str, float] = {}

    async def unknown(self, steps: list[StepSpec]) -> list[str]:
        """The plan's tools no worker has registered, by name."""
        now, today = time.monotonic(), utcnow()
        missing = []
        live: set[str] = set()  # read only for a registration older than FORGET_AFTER
        for tool in sorted(plans.tools_of(steps)):
            if self._until.get(tool, 0.0) > now:
                continue
            info = await self._store.tools.get(tool)
            if info is not None and not live and not served(info, live, today):
                live = await live_tools(self._store)
            if info is None or not served(info, live, today):
                missing.append(tool)
            else:
                self._until[tool] = now + KNOWN_TOOL_TTL
        return missing

    async def check(self, steps: list[StepSpec]) -> None:
        """Raise InvalidTaskError naming the first tool no worker has registered."""
        missing = await self.unknown(steps)
        if missing:
            raise InvalidTaskError(
                f"unknown tool {missing[0]!r}: no worker has registered it; start a worker "
                "that serves it ('tether worker MODULE:APP')"
            )


def waiting_note(missing: list[str]) -> str | None:
    """What a task kept for tools no worker serves yet says about itself."""
    if not missing:
        return None
    names = ", ".join(repr(tool) for tool in missing)
    return f"no worker serves {names} yet: the task starts when one does"
