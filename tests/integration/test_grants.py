"""What deploy/nats/roles.conf and tenants.conf grant, read from the files: the same kind of
user gets the same rights in both, the operator's API verbs are the operator's alone,
and every dashboard action is one its user may ask. (test_roles.py, test_role_holes.py
and test_tenants.py check the same by their effect on a running server.)"""

from __future__ import annotations

import re

from tests.conftest import ROOT
from tether.api.verbs import VERBS
from tether.schemas.names import DEFAULT_NAMES
from tether.ui.app import ACTIONS

ROLES = (ROOT / "deploy" / "nats" / "roles.conf").read_text()
TENANTS = (ROOT / "deploy" / "nats" / "tenants.conf").read_text()
_QUOTED = re.compile(r'^\s*"([^"]+)"\s*$', re.MULTILINE)


def _list_after(text: str, start: int, opening: str) -> list[str]:
    """The quoted subjects of the first `opening [ ... ]` after `start`."""
    begin = text.index(opening, start)
    return _QUOTED.findall(text[begin : text.index("]", begin)])


def _user(name: str) -> int:
    return ROLES.index(f"user: {name}\n")


def publish_allow(name: str) -> list[str]:
    start = ROLES.index("publish:", _user(name))
    return _list_after(ROLES, start, "allow: [")


def publish_deny(name: str) -> list[str]:
    start = ROLES.index("publish:", _user(name))
    end = ROLES.index("subscribe:", start)
    return _list_after(ROLES, start, "deny: [") if "deny: [" in ROLES[start:end] else []


def test_a_tenants_app_user_is_allowed_what_the_client_role_is() -> None:
    """Item 8 of issue 38: an allow-list, the client's, not a deny-list that misses things."""
    app_publish = _list_after(TENANTS, 0, "APP_PUBLISH: [")
    assert app_publish == publish_allow("client")
    for user in ("acme-app", "globex-app"):
        block = TENANTS[TENANTS.index(f"user: {user}\n") :]
        block = block[: block.index("\n      }")]
        assert "publish: { allow: $APP_PUBLISH }" in block, user
        assert "deny" not in block, user
        assert f'subscribe: {{ allow: ["_INBOX_{user}.>", "tether.ended.*.*"] }}' in block


def test_the_client_asks_every_api_verb_but_the_operators() -> None:
    """Item 6: `deploy` (ramp, promote, rollback) is the operator's; no other role may
    publish to it, by name or by a wildcard."""
    api = [s for s in publish_allow("client") if s.startswith(DEFAULT_NAMES.api_subject(""))]
    expected = [DEFAULT_NAMES.api_subject(v.name) for v in VERBS.values() if not v.operator]
    assert sorted(api) == sorted(expected)
    operator_only = {DEFAULT_NAMES.api_subject(v.name) for v in VERBS.values() if v.operator}
    assert operator_only == {DEFAULT_NAMES.api_subject("deploy")}
    for role in ("client", "worker", "dispatcher", "gateway", "dashboard"):
        allowed = publish_allow(role)
        assert not operator_only & set(allowed), role
        assert DEFAULT_NAMES.api_subject("*") not in allowed, role
        assert DEFAULT_NAMES.api_subject(">") not in allowed, role


def test_a_worker_may_not_write_the_deployment() -> None:
    """Item 7: allowed `$KV.tether-workers.>` for its beats and held steps, denied the
        operator's `_deployment` (a deny wins), and no message delete on that bucket (its only
    one is of the status index's rows, `Records.index`)."""
    workers = DEFAULT_NAMES.workers_bucket
    assert DEFAULT_NAMES.kv_subject(workers, ">") in publish_allow("worker")
    assert DEFAULT_NAMES.kv_subject(workers, DEFAULT_NAMES.DEPLOYMENT_KEY) in publish_deny("worker")
    deletes = [s for s in publish_allow("worker") if s.startswith("$JS.API.STREAM.MSG.DELETE")]
    assert deletes == [DEFAULT_NAMES.message_delete_subject(DEFAULT_NAMES.index_stream)]


def test_no_role_but_the_operator_may_purge_the_builds() -> None:
    """Forgetting a build frees its name (`tether gc`, the operator's): another role that
    could purge would let a worker squat it again with other shapes."""
    purge = f"$JS.API.STREAM.PURGE.{DEFAULT_NAMES.kv_stream(DEFAULT_NAMES.builds_bucket)}"
    for role in ("client", "worker", "dispatcher", "gateway", "dashboard"):
        assert not [s for s in publish_allow(role) if s.startswith("$JS.API.STREAM.PURGE")], role
    assert purge not in ROLES


def test_every_dashboard_action_is_allowed_to_the_dashboard_role() -> None:
    """Item 10: the steering box (`message`) hung, its subject not granted."""
    allowed = publish_allow("dashboard")
    for action in ACTIONS:
        assert DEFAULT_NAMES.api_subject(action) in allowed, action
