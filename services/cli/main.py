"""`tether`: the command line. Each group of commands lives in its own module."""

from __future__ import annotations

import typer

from services.cli import dev, gateway, ops, processes

app = typer.Typer(
    name="tether",
    help="Durable execution for AI agents on NATS JetStream.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
processes.register(app)
dev.register(app)
ops.register(app)
gateway.register(app)


def main() -> None:
    app()
