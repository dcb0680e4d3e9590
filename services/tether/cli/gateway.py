"""`tether gateway`: the MCP server in front of Tether's tasks."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.cli.common import (
    DEFAULT_GATEWAY_PORT,
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    MetricsPortOption,
    NatsOption,
    PortOption,
    PrefixOption,
    ReplicasOption,
    metrics_on,
    nats_config,
)
from tether.cli.processes import serve


def gateway(
    port: PortOption = DEFAULT_GATEWAY_PORT,
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to listen on.")] = "127.0.0.1",
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    replicas: ReplicasOption = 1,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Serve MCP over Streamable HTTP at http://HOST:PORT/mcp: tools run as durable tasks."""
    from tether.gateway import Gateway

    config = nats_config(nats, prefix, "tether-gateway", replicas)
    serve(Gateway(config, host, port, metrics=metrics_on(metrics_port)), name=config.name)


def register(app: typer.Typer) -> None:
    app.command()(gateway)
