"""What a build's tools take and return, as announced, and how a worker's differ (pure).

The first worker of a build that serves a tool writes its shape in the build
(`tether.deploys.announcing`), compared with the build before it (`tether.deploys.compat`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from tether.deploys.compat import input_changes, output_changes
from tether.deploys.served import ServedTool
from tether.schemas import types
from tether.schemas.builds import BuildInfo, BuildTool, ToolShape
from tether.schemas.tool_schema import inline_root


def tool_shape(tool: ServedTool) -> ToolShape:
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
        return types.json_schema(returns)  # msgspec's, or Pydantic's for a model
    except (TypeError, ValueError):  # a type neither can describe: nothing said
        return None


def new_tools(
    build: str, tools: Iterable[ServedTool], known: Iterable[BuildInfo], now: datetime
) -> list[BuildTool]:
    """The keys a worker adds to its build (`tether.deploys.announcing`): one per tool it
    serves that the build lacks, first seen now, each compared with the build's `before`
    (a new build's: the newest other build that serves one of these tools)."""
    infos = list(known)
    mine = next((info for info in infos if info.build == build), None)
    have = mine.tools if mine is not None else {}
    adding = [tool for tool in tools if tool.name not in have]
    was = mine.before if mine is not None else _newest_before(build, adding, infos, now)
    before = next((info for info in infos if info.build == was), None)
    return [_build_tool(build, tool, before, was, now) for tool in adding]


def _newest_before(
    build: str, tools: list[ServedTool], infos: list[BuildInfo], now: datetime
) -> str | None:
    names = {tool.name for tool in tools}
    older = [
        info
        for info in infos
        if info.build != build and info.first_seen <= now and names & info.tools.keys()
    ]
    return max(older, key=lambda info: info.first_seen).build if older else None


def _build_tool(
    build: str, tool: ServedTool, before: BuildInfo | None, was: str | None, now: datetime
) -> BuildTool:
    shape = tool_shape(tool)
    old = before.tools.get(tool.name) if before is not None else None
    changes = []
    if old is not None:
        changes = input_changes(old.input_schema, shape.input_schema)
        changes += output_changes(old.output_schema, shape.output_schema)
    return BuildTool(
        build=build, tool=tool.name, first_seen=now, shape=shape, before=was, changes=changes
    )


def shape_differences(announced: BuildInfo, tools: Iterable[ServedTool]) -> dict[str, list[str]]:
    """How the tools a worker serves differ from their shapes in its build, per tool (none:
    the same code, a restart or another replica). Only tools the build has count: one it
    lacks, this worker adds (a sidecar of the same release serving other tools)."""
    differences: dict[str, list[str]] = {}
    for tool in tools:
        was = announced.tools.get(tool.name)
        if was is not None and (found := tool_changes(was, as_stored(tool_shape(tool)))):
            differences[tool.name] = found
    return differences


def tool_changes(was: ToolShape, now: ToolShape) -> list[str]:
    """How `now` differs from `was`, in words; [] when they are the same."""
    if was == now:
        return []
    found = _schema_changes("input", was.input_schema, now.input_schema)
    found += input_changes(was.input_schema, now.input_schema)
    found += _schema_changes("output", was.output_schema or {}, now.output_schema or {})
    found += output_changes(was.output_schema, now.output_schema)
    if not found and (was.input_schema, was.output_schema) != (now.input_schema, now.output_schema):
        found.append("its schemas differ")
    for name in ("versioning", "when_gone", "grace_s"):
        before, after = getattr(was, name), getattr(now, name)
        if before != after:
            found.append(f"{name} {after!r}, not {before!r}")
    return list(dict.fromkeys(found))


def _schema_changes(where: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Fields added or removed (`input_changes` says what is required or retyped)."""
    old = set(inline_root(before).get("properties") or {}) if before else set()
    new = set(inline_root(after).get("properties") or {}) if after else set()
    said = [f"{where} field {name!r} is new" for name in sorted(new - old)]
    return said + [f"{where} field {name!r} is gone" for name in sorted(old - new)]


def as_stored(shape: ToolShape) -> ToolShape:
    """The shape as it reads back from the bucket (JSON: tuples are lists), to compare."""
    return msgspec.json.decode(msgspec.json.encode(shape), type=ToolShape)
