"""Whether a plan's tools are served: checked against the tools workers advertise."""

from __future__ import annotations

import time

from tether.errors import InvalidTaskError
from tether.nats.store import Store
from tether.schemas.tasks import StepSpec
from tether.tasks import plans

KNOWN_TOOL_TTL = 30.0


class KnownTools:
    """Remembers tools found in the registry for a while, so a submit costs no lookup."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._until: dict[str, float] = {}

    async def unknown(self, steps: list[StepSpec]) -> list[str]:
        """The plan's tools no worker has registered, by name."""
        now = time.monotonic()
        missing = []
        for tool in sorted(plans.tools_of(steps)):
            if self._until.get(tool, 0.0) > now:
                continue
            if await self._store.get_tool(tool) is None:
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
