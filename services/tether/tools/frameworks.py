"""Which frameworks' agents Tether adapts, told by the module their class comes from
(pure: nothing of theirs is imported to tell)."""

from __future__ import annotations

FRAMEWORKS = {
    "pydantic_ai": "tether.integrations.pydantic_ai",
    "agents": "tether.integrations.openai_agents",
    "langgraph": "tether.integrations.langgraph",
}
"""The top-level module of an agent's class, and the adapter that makes it a tool."""


def is_foreign_agent(source: object) -> bool:
    """An agent of a framework Tether adapts (the Agents SDK's `Agent` has an `as_tool`
    of its own, which is not Tether's)."""
    return type(source).__module__.split(".")[0] in FRAMEWORKS
