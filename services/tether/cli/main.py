"""`tether`: the command line. Each group of commands lives in its own module."""

from __future__ import annotations

from typing import Annotated

import typer

from tether.cli import (
    builds,
    chat,
    credentials,
    dev,
    dlq,
    fork,
    gateway,
    gc,
    model,
    processes,
    provision,
    steer,
    tasks,
    ui,
)

app = typer.Typer(
    name="tether",
    help="Durable execution for AI agents on NATS JetStream.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version  # read for --version only: it is slow

        typer.echo(f"tether {version('tether')}")
        raise typer.Exit


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Durable execution for AI agents on NATS JetStream."""


processes.register(app)
dev.register(app)
tasks.register(app)
steer.register(app)
chat.register(app)
dlq.register(app)
builds.register(app)
fork.register(app)
gc.register(app)
provision.register(app)
gateway.register(app)
ui.register(app)
model.register(app)
credentials.add_to_commands(app)  # --creds, --nkey, --tls-* on every NATS command


def main() -> None:
    app()
