"""Where a connection takes its replies: the role's own inbox under deploy/nats/roles.conf."""

from __future__ import annotations

import pytest

from tether import NatsConfig


@pytest.mark.parametrize(
    ("url", "given", "replies"),
    [
        ("nats://127.0.0.1:4222", None, "_INBOX"),
        ("nats://client:secret@nats:4222", None, "_INBOX_client"),
        ("nats://worker:pw@a:4222,nats://worker:pw@b:4222", None, "_INBOX_worker"),
        ("nats://s3cr3t-token@nats:4222", None, "_INBOX"),  # a token names no user
        ("nats://we.ird:pw@nats:4222", None, "_INBOX"),  # not one subject token
        ("nats://client:secret@nats:4222", "_INBOX_tenant_a", "_INBOX_tenant_a"),
    ],
)
def test_the_inbox_is_the_users_own_unless_given(url: str, given: str | None, replies: str) -> None:
    assert NatsConfig(url=url, inbox_prefix=given).replies == replies
