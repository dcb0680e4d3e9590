"""`tether worker` and `tether dispatcher`: long-running services."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated

import typer

from services.api import ApiService
from services.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    NatsOption,
    PrefixOption,
    ReplicasOption,
    fail,
    nats_config,
)
from services.cli.loading import AppLoadError, load_app
from services.dispatcher import Dispatcher
from services.errors import TetherError
from services.service import Service
from services.worker import Worker


def serve(*services: Service) -> None:
    """Run services until SIGTERM or Ctrl-C, then stop them gracefully (last started first)."""

    async def run() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        started: list[Service] = []
        try:
            for service in services:
                await service.start()
                started.append(service)
            await stopping.wait()
        finally:
            for service in reversed(started):
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
    replicas: ReplicasOption = 1,
) -> None:
    """Serve the tools of one or more apps."""
    try:
        loaded = [load_app(spec) for spec in apps]
    except AppLoadError as exc:
        fail(str(exc))
    config = nats_config(nats, prefix, "tether-worker", replicas)
    serve(Worker(loaded, config, concurrency=concurrency))


def dispatcher(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    api: Annotated[bool, typer.Option(help="Also answer the request/reply API.")] = True,
    replicas: ReplicasOption = 1,
) -> None:
    """Accept submitted tasks, hand off their first steps, answer `tether.api.*`."""
    config = nats_config(nats, prefix, "tether-dispatcher", replicas)
    serve(Dispatcher(config), *([ApiService(config)] if api else []))


def api(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    replicas: ReplicasOption = 1,
) -> None:
    """Answer the request/reply API on `tether.api.*` (discoverable via `$SRV.*`)."""
    serve(ApiService(nats_config(nats, prefix, "tether-api", replicas)))


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(dispatcher)
    app.command()(api)
