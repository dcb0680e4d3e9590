"""A follow-up through the gateway continues only its caller's own conversations.

An agent's input may name an earlier task (`"after": id`) whose conversation comes
first. The gateway checks that task as `tasks/get` would: another caller's task, or
none, is "not found", the same answer, so a caller learns nothing of another's tasks
(the worker checks again, for every door: see `tether.agents.owners`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from tether.schemas.plans import StepSpec
from tether.schemas.workers import ToolInfo


def named_threads(steps: list[StepSpec]) -> Iterator[tuple[str, str]]:
    """`(tool, after)` for each step, branches included, whose input names an earlier
    task (pure: whether the tool is an agent is for the caller to ask)."""
    for step in steps:
        if step.parallel is not None:
            yield from named_threads(step.parallel)
            continue
        after = step.input.get("after") if isinstance(step.input, dict) else None
        if step.tool and after is not None:
            yield step.tool, after if isinstance(after, str) else repr(after)


async def check_follow_ups(
    steps: list[StepSpec],
    tool: Callable[[str], Awaitable[ToolInfo | None]],
    owned: Callable[[str], Awaitable[Any]],
) -> None:
    """Raise `owned`'s error (task not found) for an agent step that continues a task the
    caller does not own; `tool` reads a tool's registration, `owned` the caller's task."""
    for name, after in named_threads(steps):
        info = await tool(name)
        if info is not None and info.agent:
            await owned(after)
