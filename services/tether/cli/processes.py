"""`tether worker` and `tether dispatcher`: long-running services."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated

import typer

from tether.cli.common import (
    DEFAULT_NATS,
    DEFAULT_PREFIX,
    MetricsPortOption,
    NatsOption,
    PrefixOption,
    ReplicasOption,
    fail,
    metrics_on,
    nats_config,
)
from tether.cli.loading import AppLoadError, load_app
from tether.errors import TetherError
from tether.service import Service


def serve(*services: Service, name: str = "tether") -> None:
    """Run services until SIGTERM or Ctrl-C, then stop them gracefully (last started first).

    A service that lost NATS for good stops the process with exit code 1, so that its
    supervisor (systemd, Kubernetes, `tether dev`'s caller) starts a fresh one. Traces
    are exported as `name` when the `OTEL_*` variables ask for them.
    """
    from tether import tracing

    tracing.configure(name)

    async def run() -> str | None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        started: list[Service] = []
        try:
            for service in services:
                await service.start()
                started.append(service)
            return await _until_stopped_or_lost(stopping, started)
        finally:
            for service in reversed(started):
                await service.stop()

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        lost = asyncio.run(run())
    except TetherError as exc:
        fail(str(exc))
    if lost is not None:
        fail(f"{lost}: exiting so that a fresh process takes over", code=1)


async def _until_stopped_or_lost(stopping: asyncio.Event, services: list[Service]) -> str | None:
    """None on a stop signal; why, when a service can no longer work."""
    waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(stopping.wait())]
    waiters += [asyncio.ensure_future(service.wait_lost()) for service in services]
    done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
    result = done.pop().result()
    return result if isinstance(result, str) else None


def worker(
    apps: Annotated[
        list[str], typer.Argument(metavar="MODULE:ATTR...", help="Apps to serve, as MODULE:ATTR.")
    ],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    concurrency: Annotated[
        int, typer.Option(metavar="N", help="Steps run at once, per tool.")
    ] = 32,
    replicas: ReplicasOption = 1,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Serve the tools of one or more apps."""
    from tether.worker import Worker

    try:
        loaded = [load_app(spec) for spec in apps]
    except AppLoadError as exc:
        fail(str(exc))
    config = nats_config(nats, prefix, "tether-worker", replicas)
    metrics = metrics_on(metrics_port)
    serve(Worker(loaded, config, concurrency=concurrency, metrics=metrics), name=config.name)


def dispatcher(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    api: Annotated[bool, typer.Option(help="Also answer the request/reply API.")] = True,
    replicas: ReplicasOption = 1,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Accept submitted tasks, hand off their first steps, answer `tether.api.*`."""
    from tether.api import ApiService
    from tether.dispatcher import Dispatcher

    config = nats_config(nats, prefix, "tether-dispatcher", replicas)
    dispatching = Dispatcher(config, metrics=metrics_on(metrics_port))
    serve(dispatching, *([ApiService(config)] if api else []), name=config.name)


def api(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    replicas: ReplicasOption = 1,
) -> None:
    """Answer the request/reply API on `tether.api.*` (discoverable via `$SRV.*`)."""
    from tether.api import ApiService

    config = nats_config(nats, prefix, "tether-api", replicas)
    serve(ApiService(config), name=config.name)


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(dispatcher)
    app.command()(api)
