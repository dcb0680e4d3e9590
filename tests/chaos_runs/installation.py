"""Bringing a run's Tether installation up: streams at the right replication, then the
roles, ready once every tool is registered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from tests.chaos_runs.processes import Role, Roles
from tests.chaos_runs.report import say
from tests.chaos_runs.tasks import retrying
from tests.chaos_runs.tools import APP, app
from tether import Client, Layout, NatsConfig
from tether.nats.connection import close, connect
from tether.nats.provision import provision


async def provisioned(config: NatsConfig) -> None:
    """Tether's streams and buckets at `config.replicas`, as `tether provision` makes
    them (retried: a cluster that has just formed may not have a meta leader yet)."""
    nc = await connect(config)
    try:
        layout = Layout(names=config.names, replicas=config.replicas)
        await retrying(lambda: provision(nc.jetstream(), layout), "provision", timeout=60)
    finally:
        await close(nc)


async def registered(client: Client, timeout: float = 60.0) -> None:
    """Return once a worker has registered every tool of the app."""

    async def all_there() -> bool:
        return all([await client._store.tools.get(name) for name in app.tools])

    deadline = time.monotonic() + timeout
    while not await retrying(all_there, "read the tools"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the tools were not registered within {timeout:.0f}s")
        await asyncio.sleep(0.2)


def start_roles(roles: Roles, workers: int) -> None:
    roles.dispatcher()
    for i in range(1, workers + 1):
        roles.worker(APP, f"worker-{i}")


def restart_exited(roles: Roles, exits: list[str]) -> None:
    """A supervisor's job: a role that exited on its own is noted and started again."""
    for role in roles.exited():
        exits.append(f"{role.label} exited with {role.process.returncode} (log: {role.log})")
        say(exits[-1])
        roles.started.remove(role)
        _replace(roles, role)


def _replace(roles: Roles, role: Role) -> None:
    label = f"{role.label}-r"
    if role.label.startswith("dispatcher"):
        roles.dispatcher(label)
    else:
        roles.worker(APP, label)


def labels(roles: Iterable[Role]) -> dict[str, int]:
    return {role.label: role.pid for role in roles}
