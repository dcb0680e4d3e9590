"""Builds of the code workers run, and where the steps of each task go (`tether builds`).

A build is described in `<prefix>-builds` one tool at a time: a `BuildTool` under
`<build>.<tool>` (the build's dots as `=`), written once by the build's first worker that
serves the tool. The bucket's stream refuses any second write to a key, so a tool has one
shape in a build, and workers of one build that serve different tools (sidecars released
together) each add theirs. `BuildInfo` is a build as read back: all its keys together.
The operator's `Deployment` is in the workers bucket under `_deployment` (written by
`tether builds ramp|promote|rollback`).
"""

from __future__ import annotations

from collections.abc import Iterable
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


class BuildTool(msgspec.Struct, frozen=True, kw_only=True):
    """One tool of a build: the value under `<build>.<tool>` in `<prefix>-builds`, written
    once (create-only) by the first worker of the build that serves the tool."""

    build: str
    tool: str
    first_seen: datetime
    """When a worker of the build first served this tool."""
    shape: ToolShape
    before: str | None = None
    """The build's `before` (see `BuildInfo`): every key of a build carries the one its
    first key was written with."""
    changes: list[str] = msgspec.field(default_factory=list)
    """How this tool does not fit its shape in `before` ([] when `before` lacks it)."""


class BuildInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A build as its keys in `<prefix>-builds` describe it, one `BuildTool` a tool
    (`BuildInfo.of`); not stored whole."""

    build: str
    first_seen: datetime
    """When a worker of this build first started (its earliest key): builds are ordered
    by it (newest last)."""
    tools: dict[str, ToolShape]
    before: str | None = None
    """The newest other build first seen before it that served one of its first worker's
    tools, which `changes` compares it with."""
    changes: dict[str, list[str]] = msgspec.field(default_factory=dict)
    """Per tool, how it does not fit `before` (a field gone, a type changed, a new
    required field): steps whose input was made by `before` are not moved onto it."""

    @classmethod
    def of(cls, keys: Iterable[BuildTool]) -> BuildInfo | None:
        """The build its keys describe (None: it has none); its `before` is its earliest
        key's (two first workers starting at once may have read different builds)."""
        ordered = sorted(keys, key=lambda key: (key.first_seen, key.tool))
        if not ordered:
            return None
        first = ordered[0]
        return cls(
            build=first.build,
            first_seen=first.first_seen,
            tools={key.tool: key.shape for key in ordered},
            before=first.before,
            changes={key.tool: key.changes for key in ordered if key.changes},
        )


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
    """`tether.api.builds`: list the builds. The API refuses any `action` but `list`
    there: changing where tasks go is the operator's, on `tether.api.deploy`
    (`DeployRequest`), a subject only the operator's NATS user may publish to. In
    process (`Client.builds`), an action changes the deployment as this user may."""

    action: Literal["list", "ramp", "promote", "rollback"] = "list"
    build: str | None = None
    percent: float = 0.0


class DeployRequest(msgspec.Struct, frozen=True, kw_only=True):
    """`tether.api.deploy`: change where new tasks go (`tether builds ramp|promote|
    rollback`); the reply is the builds' list after the change (`BuildsReply`)."""

    action: Literal["ramp", "promote", "rollback"]
    build: str
    percent: float = 0.0
    """`ramp`: the share of new tasks (0-100) that go to `build`."""


class BuildsReply(msgspec.Struct, frozen=True, kw_only=True):
    builds: list[BuildRow]
    deployment: Deployment
    said: str = ""
    """What a change did, in a sentence (pinned tasks included)."""
