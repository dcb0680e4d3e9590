"""Whose conversation is it: the MCP caller a task is bound to, and the rule that a
follow-up continues only a conversation of its own caller.

The gateway binds every task it creates to its caller in the task's metadata,
`{"mcp": {"caller": NAME, "key": PUBLIC KEY, "seal": SIGNATURE}}`: the seal is the
gateway's Ed25519 signature of the task's id and the caller (see
`tether.gateway.callers`). Anyone can check it and no one but the gateway can make it,
so a worker, which knows no gateway's secret, checks it too: a task is bound to the
caller its seal names under its key, and a binding copied from another task (whose seal
signs that task's id) binds it to no one that a follow-up may match. A follow-up
(`"after": id`) or an answer whose tree is bound to another owner than the conversation
it continues fails, whichever door it came by. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from nacl.exceptions import CryptoError
from nacl.signing import VerifyKey

from tether.agents.errors import ForeignConversation as ForeignConversation

MCP_METADATA_KEY = "mcp"
"""Key in a task's metadata under which the gateway keeps what the MCP client asked for
(the caller it bound the task to among it)."""


class Owner(NamedTuple):
    """The caller a task is bound to, as the gateway whose public `key` sealed it names
    it; `key` None when the binding's seal does not hold for this task (copied from
    another, or forged), which no follow-up matches."""

    caller: str
    key: str | None


def sealed_text(task_id: str, caller: str) -> bytes:
    """What a seal signs: the task's id and the caller, one line each."""
    return f"{task_id}\n{caller}".encode()


def signed(key: object, task_id: str, caller: str, seal: object) -> bool:
    """Whether `seal` (hex) is the signature of `task_id` and `caller` by `key` (hex)."""
    if not (isinstance(key, str) and isinstance(seal, str)):
        return False
    try:
        VerifyKey(bytes.fromhex(key)).verify(sealed_text(task_id, caller), bytes.fromhex(seal))
    except (ValueError, TypeError, CryptoError):  # not hex, a wrong length, a bad signature
        return False
    return True


def bound_owner(task_id: str, metadata: Mapping[str, Any]) -> Owner | None:
    """The owner task `task_id`'s metadata names (None: bound to no one), its key only
    where the seal holds for this very task."""
    requested = metadata.get(MCP_METADATA_KEY)
    if not isinstance(requested, dict) or not isinstance(requested.get("caller"), str):
        return None
    caller: str = requested["caller"]
    key = requested.get("key")
    return Owner(caller, key if signed(key, task_id, caller, requested.get("seal")) else None)


def check_same_caller(task_id: str, theirs: Owner | None, mine: Owner | None) -> None:
    """Refuse to continue task `task_id`, bound to `theirs`, from a tree bound to `mine`:
    both bound to no one, or to the same caller under the same key by seals that hold.

    The message says nothing of the conversation nor of who owns it."""
    if theirs != mine or (theirs is not None and theirs.key is None):
        raise ForeignConversation(
            f"task {task_id!r} is not a conversation of this follow-up's caller: a follow-up "
            "continues only its own caller's conversations (start a new conversation, or "
            "give the id of one of yours)"
        )
