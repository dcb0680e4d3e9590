"""`tether`: run workers and the dispatcher (more commands follow)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated, Protocol

import typer

from schemas.names import Names
from services.cli.loading import AppLoadError, load_app
from services.dispatcher import Dispatcher
from services.errors import TetherError
from services.nats.connection import DEFAULT_URL, NatsConfig
from services.worker import Worker

app = typer.Typer(
    name="tether",
    help="Durable execution for AI agents on NATS JetStream.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

NatsOption = Annotated[
    str,
    typer.Option("--nats", envvar="TETHER_NATS_URL", help="NATS server URL(s), comma-separated."),
]
PrefixOption = Annotated[
    str,
    typer.Option(
        "--prefix", envvar="TETHER_PREFIX", help="Prefix of every subject, stream and bucket."
    ),
]


class _Service(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def request_stop(self) -> None: ...
    async def wait_stopped(self) -> None: ...


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=2)


def _serve(service: _Service) -> None:
    """Run a service until SIGTERM or Ctrl-C, then stop it gracefully."""

    async def run() -> None:
        await service.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.request_stop)
        try:
            await service.wait_stopped()
        finally:
            await service.stop()

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(run())
    except TetherError as exc:
        raise _fail(str(exc)) from None


@app.command()
def worker(
    apps: Annotated[list[str], typer.Argument(help="Apps to serve, as MODULE:ATTR.")],
    nats: NatsOption = DEFAULT_URL,
    prefix: PrefixOption = "tether",
    concurrency: Annotated[int, typer.Option(help="Steps run at once, per tool.")] = 32,
) -> None:
    """Serve the tools of one or more apps."""
    try:
        loaded = [load_app(spec) for spec in apps]
    except AppLoadError as exc:
        raise _fail(str(exc)) from None
    config = NatsConfig(url=nats, names=Names(prefix=prefix), name="tether-worker")
    _serve(Worker(loaded, config, concurrency=concurrency))


@app.command()
def dispatcher(nats: NatsOption = DEFAULT_URL, prefix: PrefixOption = "tether") -> None:
    """Accept submitted tasks and hand off their first steps."""
    _serve(Dispatcher(NatsConfig(url=nats, names=Names(prefix=prefix), name="tether-dispatcher")))


def main() -> None:
    app()
