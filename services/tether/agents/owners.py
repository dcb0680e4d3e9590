"""Whose conversation is it: the MCP caller a task is bound to, and the rule that a
follow-up continues only a conversation of its own caller.

The gateway binds every task it creates to its caller in the task's metadata,
`{"mcp": {"caller": NAME, "seal": HMAC}}` (see `tether.gateway.callers`). A worker has no
seal key, so it compares the names: a follow-up (`"after": id`) whose tree is bound to
another caller than the conversation it continues (or to one where that one is bound to
none) fails, whichever door it came by. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.agents.errors import ForeignConversation as ForeignConversation

MCP_METADATA_KEY = "mcp"
"""Key in a task's metadata under which the gateway keeps what the MCP client asked for
(the caller it bound the task to among it)."""


def bound_caller(metadata: Mapping[str, Any]) -> str | None:
    """The caller named in a task's metadata (None: bound to no one). Unverified: the
    gateway checks the seal before it shows a task; here only equality matters."""
    requested = metadata.get(MCP_METADATA_KEY)
    caller = requested.get("caller") if isinstance(requested, dict) else None
    return caller if isinstance(caller, str) else None


def check_same_caller(task_id: str, theirs: str | None, mine: str | None) -> None:
    """Refuse to continue task `task_id`, bound to `theirs`, from a tree bound to `mine`.

    The message says nothing of the conversation nor of who owns it."""
    if theirs != mine:
        raise ForeignConversation(
            f"task {task_id!r} is not a conversation of this follow-up's caller: a follow-up "
            "continues only its own caller's conversations (start a new conversation, or "
            "give the id of one of yours)"
        )
