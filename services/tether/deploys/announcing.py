"""A worker's build, announced one tool at a time: the first worker of a build that serves
a tool writes the tool's shape in the build (the server refuses any second write), and a
later worker of the build whose shape of a tool differs is refused at start, so a tool
never has two shapes in one build (`tether builds`). Workers of one build that serve
different tools (sidecars released together) each add theirs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tether.deploys.served import ServedTool
from tether.deploys.shapes import new_tools, shape_differences
from tether.errors import DefinitionError
from tether.nats.workers import Workers
from tether.schemas.builds import BuildInfo


async def announce_build(
    workers: Workers, build: str, tools: Iterable[ServedTool], now: datetime
) -> BuildInfo:
    """The build with this worker's tools in it: each tool the build has must have the
    same shape here (DefinitionError, in one line, when one does not), each it lacks is
    added (create-only: when another worker added it first, its shape must match too)."""
    served = list(tools)
    there = await workers.build(build)
    if there is None or not there.tools.keys() >= {tool.name for tool in served}:
        if there is not None:
            _refuse_differences(build, there, served)  # before adding anything
        for entry in new_tools(build, served, await workers.builds(), now):
            await workers.create_build_tool(entry)  # the first one stays: compared below
        there = await workers.build(build)
    if there is None:  # no tool, or forgotten (`tether gc`) this instant
        return BuildInfo(build=build, first_seen=now, tools={})
    _refuse_differences(build, there, served)
    return there


def _refuse_differences(build: str, there: BuildInfo, served: list[ServedTool]) -> None:
    if differences := shape_differences(there, served):
        raise DefinitionError(refusal(build, differences))


def refusal(build: str, differences: dict[str, list[str]]) -> str:
    """One line: the build, each tool that differs and how, and what to do."""
    tools = "; ".join(
        f"tool {tool!r}: {', '.join(found)}" for tool, found in sorted(differences.items())
    )
    return (
        f"build {build!r} was announced with other shapes of tools this worker serves "
        f"({tools}): a tool has one shape in a build, so run this code as a new build "
        f"(--build with another name), or run build {build}'s own code"
    )
