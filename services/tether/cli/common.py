"""What every `tether` command shares: options, the NATS config, one-line errors."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from tether.cli import credentials

if TYPE_CHECKING:
    from tether.metrics import Metrics
    from tether.nats.connection import NatsConfig

NatsOption = Annotated[
    str,
    typer.Option(
        "--nats",
        envvar="TETHER_NATS_URL",
        metavar="URL",
        help="NATS server URL(s), comma-separated.",
    ),
]
PrefixOption = Annotated[
    str,
    typer.Option(
        "--prefix",
        envvar="TETHER_PREFIX",
        metavar="PREFIX",
        help="Prefix of every subject, stream and bucket.",
    ),
]
ReplicasOption = Annotated[
    int,
    typer.Option(
        "--replicas",
        envvar="TETHER_REPLICAS",
        metavar="N",
        min=1,
        max=5,
        help="Replicas of the streams and buckets Tether creates (3 on a cluster).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

DEFAULT_NATS = "nats://127.0.0.1:4222"
DEFAULT_PREFIX = "tether"
DEFAULT_GATEWAY_PORT = 8765
DEFAULT_UI_PORT = 8233
"""NATS's default URL and `Gateway`'s and `Dashboard`'s default ports, kept here so
option defaults need not import them (a unit test keeps each pair equal)."""


def nats_config(url: str, prefix: str, name: str = "tether-cli", replicas: int = 1) -> NatsConfig:
    """The command's NATS config, with the credentials it was given (`--creds`, ...);
    with none, the token of the embedded server of `TETHER_DATA_DIR` (`.tether`) when
    the URL names that server."""
    from tether.nats.connection import NatsConfig
    from tether.schemas.names import Names

    given = credentials.current()
    return NatsConfig(
        url=url,
        names=Names(prefix=prefix),
        name=name,
        replicas=replicas,
        credentials=given.creds,
        nkey_seed=given.nkey,
        tls_ca=given.tls_ca,
        tls_cert=given.tls_cert,
        tls_key=given.tls_key,
        inbox_prefix=given.inbox_prefix,
        embedded_dir=os.environ.get("TETHER_DATA_DIR") or ".tether",
    )


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line saying what happened and what to do, then exit non-zero."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code=code)


PortOption = Annotated[int, typer.Option(metavar="PORT", help="Port to listen on (0: a free one).")]

MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        metavar="PORT",
        envvar="TETHER_METRICS_PORT",
        help="Serve Prometheus metrics at http://127.0.0.1:PORT/metrics (0: a free port).",
    ),
]


def metrics_on(port: int | None) -> Metrics | None:
    """The process's metrics, served on `port`; None when no port was given."""
    if port is None:
        return None
    from tether.metrics import Metrics

    metrics = Metrics()
    served = metrics.serve(port)
    typer.echo(f"metrics at http://127.0.0.1:{served}/metrics", err=True)
    return metrics
