"""When an MCP call a crash cut off may be sent again, and what the model is told when
it may not: one rule for Tether's own agents and every foreign agent's MCP calls
(`integrations.journal.Journal.send`). Pure, and free of the `mcp` package, which a
worker then loads only when it calls a server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_types import ToolAnnotations


def repeatable(hints: ToolAnnotations | Mapping[str, Any] | None) -> bool:
    """Whether a call of the tool with these annotations may be sent again when a crash
    left its outcome unknown (`readOnlyHint` or `idempotentHint`; no hints: it may not).
    The hints as the server listed them, or as a framework kept them (a dict)."""
    if hints is None:
        return False
    if isinstance(hints, Mapping):
        keys = ("readOnlyHint", "read_only_hint", "idempotentHint", "idempotent_hint")
        return any(bool(hints.get(key)) for key in keys)
    return bool(hints.read_only_hint or hints.idempotent_hint)


def unknown_outcome(tool: str) -> str:
    """What the model is told of a call of `tool` that a crash cut off and that is not
    sent again."""
    return (
        f"Error: the outcome of this call of {tool} is unknown: the worker making it "
        "stopped mid-call, and the tool does not say it is safe to call again. Check "
        "whether it took effect before calling it again."
    )
