"""`tether provision`: create Tether's streams and buckets once, as an operator."""

from __future__ import annotations

import typer

from tether.cli import render
from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    NatsOption,
    PrefixOption,
    ReplicasOption,
    nats_config,
)
from tether.cli.running import ExitCode, run


async def _provision(nats: str, prefix: str, replicas: int) -> ExitCode:
    from tether.nats.connection import close, connect, jetstream_context
    from tether.nats.layout import Layout, expected_streams, graph_streams
    from tether.nats.provision import provision

    config = nats_config(nats, prefix, "tether-provision", replicas)
    nc = await connect(config)
    try:
        await provision(jetstream_context(nc), Layout.for_config(config))
    finally:
        await close(nc)
    streams = expected_streams(config.names) + graph_streams(config.names)
    render.print_lines(
        [f"provisioned {len(streams)} streams under prefix {prefix!r} at R{replicas}:"]
        + [f"  {stream}" for stream in streams]
    )
    return ExitCode.OK


def provision_command(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    replicas: ReplicasOption = 1,
) -> None:
    """Create (or update) Tether's streams, buckets and blob store: once, with a user that
    may; the other roles then need no right to create them. Safe to run again."""
    run(_provision(nats, prefix, replicas))


def register(app: typer.Typer) -> None:
    app.command("provision")(provision_command)
