"""Which build of the code a worker runs: named by its operator, or by what it serves.

Every step's checkpoint and its `step_started`/`step_completed` events name the build
that ran it, and a task's record the build that started it, so a deploy can be read
back: which code ran which step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from tether.errors import DefinitionError
from tether.schemas.builds import BuildInfo, ToolShape
from tether.worker.app import Tool
from tether.worker.compat import input_changes, output_changes

BUILD_PATTERN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")


def validate_build(name: str) -> str:
    if not BUILD_PATTERN.match(name):
        raise DefinitionError(
            f"build {name!r} is not a build name: use up to 64 letters, digits, '_', '-' "
            "and '.' (e.g. v2, 1.4.0, 2026-12-02.1, a git hash)"
        )
    return name


def default_build(versions: Iterable[str | None], tools: Iterable[Tool]) -> str:
    """The apps' versions when they all have one (`App(version=...)`), else `h` and a
    hash of what the worker serves: its tools' names, descriptions and schemas, so two
    workers with the same definitions share a build and a changed schema makes a new one."""
    named = list(versions)
    if named and all(named):
        return validate_build("_".join(v for v in named if v))
    shapes = sorted(
        (tool.name, tool.description, tool.input_schema(), tool.output_schema) for tool in tools
    )
    digest = hashlib.sha256(msgspec.json.encode(shapes)).hexdigest()
    return "h" + digest[:11]


def tool_shape(tool: Tool) -> ToolShape:
    """What a build's tool takes and returns, and how its tasks move between builds."""
    return ToolShape(
        input_schema=tool.input_schema(),
        output_schema=tool.output_schema or _schema_of(tool.returns),
        versioning=tool.versioning or "moving",
        when_gone=tool.when_gone,
        grace_s=tool.build_grace.total_seconds(),
    )


def _schema_of(returns: Any) -> dict[str, Any] | None:
    if returns in (Any, None, type(None)):
        return None
    try:
        schema: dict[str, Any] = msgspec.json.schema(returns)
    except (TypeError, ValueError):  # a type msgspec cannot describe: nothing said
        return None
    return schema


def build_info(
    build: str, tools: Iterable[Tool], known: Iterable[BuildInfo], now: datetime
) -> BuildInfo:
    """This build as its worker announces it: first seen now (or when it was before),
    compared with the newest other build (`changes`)."""
    shapes = {tool.name: tool_shape(tool) for tool in tools}
    earlier = [info for info in known if info.build != build]
    mine = next((info for info in known if info.build == build), None)
    first_seen = mine.first_seen if mine is not None else now
    older = [info for info in earlier if info.first_seen <= first_seen]
    before = max(older, key=lambda info: info.first_seen) if older else None
    changes: dict[str, list[str]] = {}
    if before is not None:
        for name, shape in shapes.items():
            was = before.tools.get(name)
            if was is None:
                continue
            found = input_changes(was.input_schema, shape.input_schema)
            found += output_changes(was.output_schema, shape.output_schema)
            if found:
                changes[name] = found
    if mine is not None:  # tools another worker of the build serves stay listed
        shapes = {**mine.tools, **shapes}
        changes = {**mine.changes, **changes}
    return BuildInfo(
        build=build,
        first_seen=first_seen,
        tools=shapes,
        before=before.build if before is not None else None,
        changes=changes,
    )
