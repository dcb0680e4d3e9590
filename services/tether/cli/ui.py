"""`tether ui`: the web dashboard."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    DEFAULT_UI_PORT,
    NatsOption,
    PortOption,
    PrefixOption,
    nats_config,
)
from tether.cli.processes import serve


def ui(
    port: PortOption = DEFAULT_UI_PORT,
    host: Annotated[
        str,
        typer.Option(
            metavar="HOST",
            help="Address to listen on (another than loopback "
            "gets a token, generated when none is given).",
        ),
    ] = "127.0.0.1",
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            envvar="TETHER_UI_ALLOWED_HOSTS",
            metavar="NAME",
            help="A name the dashboard may be reached by (beside addresses and localhost), "
            "e.g. behind a proxy; repeatable.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="TETHER_UI_TOKEN",
            metavar="TOKEN",
            help="Require this bearer token (the printed URL carries it once, into a cookie).",
        ),
    ] = None,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Serve the dashboard: tasks, their timelines and tokens live, dead letters, workers."""
    from tether.ui import Dashboard

    config = nats_config(nats, prefix, "tether-ui")
    dashboard = Dashboard(config, host, port, token=token or None, allowed_hosts=allowed_host or ())
    serve(dashboard, name=config.name)


def register(app: typer.Typer) -> None:
    app.command()(ui)
