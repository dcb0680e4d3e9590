"""`tether worker` and `tether dispatcher`: long-running services."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated, Protocol

import typer

from services.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    NatsOption,
    PrefixOption,
    fail,
    nats_config,
)
from services.cli.loading import AppLoadError, load_app
from services.dispatcher import Dispatcher
from services.errors import TetherError
from services.worker import Worker


class Service(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def request_stop(self) -> None: ...
    async def wait_stopped(self) -> None: ...


def serve(service: Service) -> None:
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
        fail(str(exc))


def worker(
    apps: Annotated[list[str], typer.Argument(help="Apps to serve, as MODULE:ATTR.")],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    concurrency: Annotated[int, typer.Option(help="Steps run at once, per tool.")] = 32,
) -> None:
    """Serve the tools of one or more apps."""
    try:
        loaded = [load_app(spec) for spec in apps]
    except AppLoadError as exc:
        fail(str(exc))
    serve(Worker(loaded, nats_config(nats, prefix, "tether-worker"), concurrency=concurrency))


def dispatcher(nats: NatsOption = DEFAULT_NATS, prefix: PrefixOption = DEFAULT_PREFIX) -> None:
    """Accept submitted tasks and hand off their first steps."""
    serve(Dispatcher(nats_config(nats, prefix, "tether-dispatcher")))


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(dispatcher)
