"""No role can erase a bucket by a rollup: nats-py makes a KV bucket with rollups on, and
then whoever may put one key (a dispatcher a task record, a worker a checkpoint or a
graph's thread) could send `Nats-Rollup: all` with it and purge every key. Provisioning
turns them off, on a real nats-server started from deploy/nats/roles.conf."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nats.js.errors import APIError

from tests.integration.test_roles import RolesServer, _provision_as_operator, raw, roles_server
from tether.nats.layout import Layout, bucket_configs
from tether.schemas.names import DEFAULT_NAMES as NAMES

ROLLUP = {"Nats-Rollup": "all"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("rollups")) as started:
        yield started


async def test_every_bucket_tether_makes_refuses_rollups(server: RolesServer) -> None:
    await _provision_as_operator(server)
    buckets = [c.bucket for c in bucket_configs(Layout())]
    buckets += [NAMES.builds_bucket, NAMES.graphs_bucket]
    async with raw(server, "operator") as operator:
        js = operator.nc.jetstream()
        for bucket in buckets:
            assert bucket is not None
            config = (await js.stream_info(NAMES.kv_stream(bucket))).config
            assert config.allow_rollup_hdrs is False, bucket


@pytest.mark.parametrize(
    ("role", "bucket"),
    [("dispatcher", NAMES.tasks_bucket), ("worker", NAMES.checkpoints_bucket)],
)
async def test_a_rollup_sent_with_a_put_a_role_may_make_is_refused_and_erases_nothing(
    server: RolesServer, role: str, bucket: str
) -> None:
    await _provision_as_operator(server)
    stream = NAMES.kv_stream(bucket)
    async with raw(server, "operator") as operator:
        kv = await operator.nc.jetstream().key_value(bucket)
        await kv.put(f"kept-{role}", b"someone else's")
        before = (await operator.nc.jetstream().stream_info(stream)).state.messages
    async with raw(server, role) as attacker:
        subject = NAMES.kv_subject(bucket, f"mine-{role}")
        with pytest.raises(APIError, match="rollup"):
            await attacker.nc.jetstream().publish(subject, b"x", headers=ROLLUP)
    async with raw(server, "operator") as operator:
        kv = await operator.nc.jetstream().key_value(bucket)
        assert (await kv.get(f"kept-{role}")).value == b"someone else's"
        assert (await operator.nc.jetstream().stream_info(stream)).state.messages == before
