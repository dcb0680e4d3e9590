"""An MCP task's caller is sealed by the gateway: only a key its replicas share makes a
seal, and anyone (a worker too) can check one, for its own task and caller only."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import msgspec
import pytest

from tether.agents.owners import (
    ForeignConversation,
    Owner,
    bound_owner,
    check_same_caller,
    signed,
)
from tether.gateway.callers import public_key, seal, seal_key
from tether.gateway.tasks import owner
from tether.schemas.records import TaskRecord

TOKENS = {"alice-token-0123456789": "alice", "bob-token-0123456789": "bob"}


def test_a_seal_holds_for_its_task_and_caller_only() -> None:
    key = seal_key(TOKENS)
    assert key is not None
    proof, public = seal(key, "t1", "alice"), public_key(key)
    assert signed(public, "t1", "alice", proof)
    assert not signed(public, "t1", "bob", proof)
    assert not signed(public, "t2", "alice", proof)
    assert not signed(public, "t1", "alice", "0" * 128)
    assert not signed(public, "t1", "alice", None)
    assert not signed(public_key(seal_key(TOKENS, "another-gateway")), "t1", "alice", proof)


def test_the_key_is_the_seal_secret_when_given_else_drawn_from_every_token() -> None:
    from_tokens, from_secret = seal_key(TOKENS), seal_key(TOKENS, "a-long-random-secret")
    assert from_tokens != from_secret
    assert seal_key(TOKENS) == from_tokens  # every replica with the same tokens agrees
    assert seal_key({"alice-token-0123456789": "alice"}) != from_tokens  # one token is not all
    assert seal_key({}) is None


def test_a_binding_copied_to_another_task_binds_it_to_no_one_a_follow_up_matches() -> None:
    key = seal_key(TOKENS, "a-long-random-secret")
    assert key is not None
    binding = {"caller": "alice", "key": public_key(key), "seal": seal(key, "t1", "alice")}
    alices = bound_owner("t1", {"mcp": binding})
    assert alices == Owner("alice", public_key(key))
    copied = bound_owner("t2", {"mcp": binding})
    assert copied == Owner("alice", None)
    check_same_caller("t1", alices, alices)
    for mine in (copied, None, Owner("alice", "0" * 64)):
        with pytest.raises(ForeignConversation):
            check_same_caller("t1", alices, mine)
    with pytest.raises(ForeignConversation):  # two unsealed bindings match no one either
        check_same_caller("t1", copied, copied)


def _record(task_id: str, binding: dict[str, str]) -> TaskRecord:
    """A record as it is stored, bound by `binding`."""
    now = datetime.now(UTC).isoformat()
    stored = {"task_id": task_id, "status": "running", "steps": [{"tool": "a"}]}
    times = {"created_at": now, "updated_at": now}
    return msgspec.convert({**stored, **times, "metadata": {"mcp": binding}}, TaskRecord)


def test_the_gateway_takes_a_task_as_a_callers_only_under_its_own_key() -> None:
    key, other = seal_key(TOKENS, "a-long-random-secret"), seal_key(TOKENS, "another")
    assert key is not None and other is not None
    mine = {"caller": "alice", "key": public_key(key), "seal": seal(key, "t1", "alice")}
    theirs = {"caller": "alice", "key": public_key(other), "seal": seal(other, "t1", "alice")}
    assert owner(_record("t1", mine), key) == "alice"
    assert owner(_record("t2", mine), key) is None  # copied
    assert owner(_record("t1", theirs), key) is None  # another gateway's seal
    assert owner(_record("t1", mine), None) is None  # a gateway without tokens


def test_a_task_sealed_before_seals_were_signatures_stays_its_callers_at_the_gateway() -> None:
    """An HMAC seal (no `key`): the gateway keeps showing it to its caller; a worker, which
    cannot check it, takes it for no one's (a follow-up of it fails)."""
    key = seal_key(TOKENS)
    assert key is not None
    proof = hmac.new(key, b"t1\nalice", hashlib.sha256).hexdigest()
    legacy = {"caller": "alice", "seal": proof}
    assert owner(_record("t1", legacy), key) == "alice"
    assert owner(_record("t2", legacy), key) is None
    assert bound_owner("t1", {"mcp": legacy}) == Owner("alice", None)
