"""Builds of the code workers run, and where the steps of each task go (`tether builds`).

Kept in the workers bucket beside the workers' beats: a build's `BuildInfo` under
`_build_<build>` (written by its workers as they start) and the operator's
`Deployment` under `_deployment` (written by `tether builds ramp|promote|rollback`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

Versioning = Literal["moving", "pinned"]
"""`moving`: a task's next step runs on the newest build that serves its tool (unless
that build's tool would refuse the step's input); `pinned`: every step of a task runs
on the build that started it."""
WhenGone = Literal["wait", "move", "fail"]
"""What a pinned step does when no worker of its build is left: wait for one, move to
the current build after `grace_s` (unless that build's tool would refuse its input), or
fail the task saying so."""


BuildState = Literal["current", "ramp", "retired", "old", ""]


class ToolShape(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool as one build serves it: what it takes and returns, and how its tasks move
    between builds."""

    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    versioning: Versioning = "moving"
    when_gone: WhenGone = "move"
    grace_s: float = 60.0


class BuildInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A build, as its first worker announced it."""

    build: str
    first_seen: datetime
    """When a worker of this build first started: builds are ordered by it (newest last)."""
    tools: dict[str, ToolShape]
    before: str | None = None
    """The newest build before it, which `changes` compares it with."""
    changes: dict[str, list[str]] = msgspec.field(default_factory=dict)
    """Per tool, how it does not fit `before` (a field gone, a type changed, a new
    required field): steps whose input was made by `before` are not moved onto it."""


class Deployment(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where new tasks go, as the operator last said. Unset, new tasks and moving steps
    go to the newest build."""

    current: str | None = None
    """`tether builds promote`: new tasks and moving steps go to this build."""
    ramp: str | None = None
    percent: float = 0.0
    """`tether builds ramp`: this share of new tasks (by task id) go to `ramp`."""
    retired: list[str] = msgspec.field(default_factory=list)
    """`tether builds rollback`: builds that take no new task and no moving step (their
    pinned tasks stay on them while their workers live)."""
    updated_at: datetime | None = None


class BuildRow(msgspec.Struct, frozen=True, kw_only=True):
    """A build as `tether builds` lists it."""

    build: str
    first_seen: datetime
    workers: int = 0
    """Workers of this build up now (draining ones included)."""
    draining: int = 0
    running: int = 0
    """Steps its workers are running."""
    routed: int = 0
    """Steps routed to it and not taken yet (pinned to it, or its input made by it)."""
    share: float = 0.0
    """The percentage of new tasks it gets."""
    state: BuildState = ""
    """`current`: new tasks go here; `ramp`: its share does; `retired`: rolled back;
    `old`: no worker of it is up."""
    tools: list[str] = msgspec.field(default_factory=list)
    before: str | None = None
    changes: dict[str, list[str]] = msgspec.field(default_factory=dict)


class BuildsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`tether.api.builds`: list the builds (no `action`), or change where tasks go."""

    action: Literal["list", "ramp", "promote", "rollback"] = "list"
    build: str | None = None
    percent: float = 0.0


class BuildsReply(msgspec.Struct, frozen=True, kw_only=True):
    builds: list[BuildRow]
    deployment: Deployment
    said: str = ""
    """What a change did, in a sentence (pinned tasks included)."""
