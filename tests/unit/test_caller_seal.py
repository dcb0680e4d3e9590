"""An MCP task's caller is sealed by the gateway: only a key its replicas share opens it."""

from __future__ import annotations

from tether.gateway.callers import seal, seal_key, sealed

TOKENS = {"alice-token-0123456789": "alice", "bob-token-0123456789": "bob"}


def test_a_seal_holds_for_its_task_and_caller_only() -> None:
    key = seal_key(TOKENS)
    assert key is not None
    proof = seal(key, "t1", "alice")
    assert sealed(key, "t1", "alice", proof)
    assert not sealed(key, "t1", "bob", proof)
    assert not sealed(key, "t2", "alice", proof)
    assert not sealed(key, "t1", "alice", "0" * 64)
    assert not sealed(key, "t1", "alice", None)


def test_the_key_is_the_seal_secret_when_given_else_drawn_from_every_token() -> None:
    from_tokens, from_secret = seal_key(TOKENS), seal_key(TOKENS, "a-long-random-secret")
    assert from_tokens != from_secret
    assert seal_key(TOKENS) == from_tokens  # every replica with the same tokens agrees
    assert seal_key({"alice-token-0123456789": "alice"}) != from_tokens  # one token is not all
    assert seal_key({}) is None
