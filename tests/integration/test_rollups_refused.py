"""No role can erase the work queue or a blob store with one message (issue 48, items 4
and 5): `Nats-Rollup: all` sent by each role onto each of these streams, on a real
nats-server started from deploy/nats/roles.conf, is refused (the roles that may publish
there) or never stored (those that may not), and every message stays. The timers
stream takes rollups (a stream with schedules must), so only the dispatchers publish
into it."""

from __future__ import annotations

from collections.abc import Iterator

import nats.errors
import pytest
from nats.js.errors import APIError

from tests.integration.test_roles import RolesServer, _provision_as_operator, raw, roles_server
from tether.nats.codes import ROLLUP_NOT_PERMITTED
from tether.schemas.names import DEFAULT_NAMES as NAMES

ROLLUP = {"Nats-Rollup": "all"}
ROLES = ["worker", "dispatcher", "gateway", "client", "dashboard"]
BLOBS = f"OBJ_{NAMES.blobs_bucket}"
GRAPH_BLOBS = f"OBJ_{NAMES.graph_blobs_bucket}"
TARGETS = {
    NAMES.work_stream: NAMES.work_subject("kept"),
    BLOBS: f"$O.{NAMES.blobs_bucket}.C.kept",
    GRAPH_BLOBS: f"$O.{NAMES.graph_blobs_bucket}.C.kept",
}
"""Each stream, and a subject of it that a role with a grant there may publish on."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("rollups")) as started:
        yield started


async def _stored(server: RolesServer) -> dict[str, int]:
    """How many messages each stream holds, as the operator reads it."""
    async with raw(server, "operator") as operator:
        js = operator.nc.jetstream()
        streams = [*TARGETS, NAMES.timers_stream]
        return {stream: (await js.stream_info(stream)).state.messages for stream in streams}


async def _fill(server: RolesServer) -> None:
    """A queued step, two blobs' chunks and a sleeping step's timer, from the operator."""
    async with raw(server, "operator") as operator:
        js = operator.nc.jetstream()
        for subject in TARGETS.values():
            await js.publish(subject, b"someone else's")
        await js.publish(
            NAMES.timer_subject("t.1"),
            b"{}",
            headers={
                "Nats-Schedule": "@at 2999-01-01T00:00:00Z",
                "Nats-Schedule-Target": NAMES.fired_subject("t.1"),
            },
        )


@pytest.fixture
async def before(server: RolesServer) -> dict[str, int]:
    """Provisioned by the operator and filled: what each stream then holds."""
    await _provision_as_operator(server)
    await _fill(server)
    return await _stored(server)


@pytest.mark.parametrize("role", ROLES)
async def test_no_role_erases_the_work_queue_or_a_blob_store_with_a_rollup(
    server: RolesServer, before: dict[str, int], role: str
) -> None:
    async with raw(server, role) as attacker:
        js = attacker.nc.jetstream()
        for stream, subject in TARGETS.items():
            try:
                await js.publish(subject, b"", headers=ROLLUP, timeout=0.5)
            except APIError as exc:  # may publish there: the stream refuses the rollup
                assert exc.err_code == ROLLUP_NOT_PERMITTED, (role, stream, exc)
            except nats.errors.TimeoutError:  # may not: the server dropped it
                await attacker.refused(subject)
            else:
                raise AssertionError(f"{role} rolled {stream} up")
    assert await _stored(server) == before


@pytest.mark.parametrize("role", ["worker", "gateway", "client", "dashboard"])
async def test_only_the_dispatchers_publish_into_the_timers_stream(
    server: RolesServer, before: dict[str, int], role: str
) -> None:
    async with raw(server, role) as attacker:
        subject = NAMES.timer_subject("mine")
        await attacker.nc.publish(subject, b"", headers=ROLLUP)
        await attacker.nc.flush()
        await attacker.refused(subject)
    assert await _stored(server) == before
