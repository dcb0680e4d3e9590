"""Which frameworks' agents Tether adapts, told by the module their class comes from
(pure: nothing of theirs is imported to tell). The one list a new framework's adapter
joins: `App.add` and `tether.run` look here before anything of the framework loads."""

from __future__ import annotations

FRAMEWORKS = {
    "pydantic_ai": "tether.integrations.pydantic_ai",
    "agents": "tether.integrations.openai_agents",
    "langgraph": "tether.integrations.langgraph",
}
"""The top-level module of an agent's class, and the adapter that makes it a tool."""


def framework_of(source: object) -> str | None:
    """The adapter of `source`'s framework, told by its class or the nearest of its bases
    (a subclass of a framework's `Agent` is that framework's agent), or None."""
    for kind in type(source).__mro__:
        adapter = FRAMEWORKS.get(kind.__module__.split(".")[0])
        if adapter is not None:
            return adapter
    return None


def is_foreign_agent(source: object) -> bool:
    """An agent of a framework Tether adapts (the Agents SDK's `Agent` has an `as_tool`
    of its own, which is not Tether's)."""
    return framework_of(source) is not None
