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
    token: Annotated[
        list[str] | None,
        typer.Option(
            "--token",
            envvar="TETHER_GATEWAY_TOKENS",
            metavar="NAME=TOKEN",
            help="Require a bearer token; each names a caller, whose MCP tasks no other caller "
            "sees. Repeatable; the variable takes NAME=TOKEN,NAME=TOKEN.",
        ),
    ] = None,
    seal_key: Annotated[
        str | None,
        typer.Option(
            "--seal-key",
            envvar="TETHER_GATEWAY_SEAL_KEY",
            metavar="SECRET",
            help="Seals each MCP task to its caller; give every replica the same (default: "
            "drawn from the tokens).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve MCP over Streamable HTTP at http://HOST:PORT/mcp: tools run as durable tasks."""
    from tether.gateway import Gateway
    from tether.gateway.callers import parse_tokens
    from tether.http import loopback

    tokens = parse_tokens(token or [])
    if not tokens and not loopback(host):
        typer.secho(
            f"warning: the gateway on {host} takes no token: anyone who reaches it can run "
            "tools and read every MCP task (pass --token NAME=TOKEN)",
            err=True,
            fg=typer.colors.YELLOW,
        )
    config = nats_config(nats, prefix, "tether-gateway", replicas)
    gateway = Gateway(
        config, host, port, metrics=metrics_on(metrics_port), tokens=tokens, seal_key=seal_key
    )
    serve(gateway, name=config.name)


def register(app: typer.Typer) -> None:
    app.command()(gateway)
