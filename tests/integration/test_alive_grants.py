"""deploy/nats/roles.conf and a worker's question (issue 51): workers ask each other
whether they are alive on `tether.worker.<key>.alive` and answer their own, and no other
role may ask (it would choose where a worker's answer goes) or answer (it could keep a
dead worker's held steps from running again)."""

from __future__ import annotations

from collections.abc import Iterator

import nats.errors
import pytest

from tests.apps.tools import app
from tests.integration.test_roles import (
    ROLES,
    RolesServer,
    _provision_as_operator,
    raw,
    roles_server,
)
from tether import Worker
from tether.nats.alive import Asked, ask_alive
from tether.schemas.names import DEFAULT_NAMES

ALIVE = DEFAULT_NAMES.alive_subject("w1")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("alive")) as started:
        yield started


async def test_only_workers_ask_and_answer_whether_a_worker_is_alive(server: RolesServer) -> None:
    await _provision_as_operator(server)
    async with Worker(app, server.config("worker"), worker_id="w1"):
        async with raw(server, "worker") as peer:
            assert await ask_alive(peer.nc, ALIVE, 5) is Asked.ALIVE
            gone = DEFAULT_NAMES.alive_subject("nobody")
            assert await ask_alive(peer.nc, gone, 5) is Asked.GONE
        assert server.violations(users={"worker"}) == []
        for role in sorted(ROLES - {"worker", "operator"}):
            async with raw(server, role) as other:
                await other.nc.subscribe(DEFAULT_NAMES.alive_subject("*"))
                await other.refused(f'subscription to "{DEFAULT_NAMES.alive_subject("*")}"')
                with pytest.raises(nats.errors.TimeoutError):
                    await other.nc.request(ALIVE, b"", timeout=0.5)
                await other.refused(f'publish to "{ALIVE}"')
