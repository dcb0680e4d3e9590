"""`tether worker`, `dispatcher` and `api`, and the supervision of every long-running command."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Sequence
from datetime import timedelta
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
from tether.cli.waiting import Waiting, start_waiting
from tether.errors import DefinitionError, TetherError
from tether.service import Service

log = logging.getLogger("tether.cli")


def serve(*services: Service, name: str = "tether", waiting: Waiting | None = None) -> None:
    """Run services with logs and traces on (exported as `name` when the `OTEL_*`
    variables ask for them), as `supervise` does."""
    from tether import tracing

    tracing.configure(name)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        supervise(services, waiting)
    except TetherError as exc:
        fail(str(exc))


def supervise(services: Sequence[Service], waiting: Waiting | None = None) -> None:
    """Start services in order and run them until SIGTERM or Ctrl-C, then stop them
    gracefully (last started first); a second signal hurries the stop.

    With `waiting` (the worker, the dispatcher, the API), a start that finds NATS away
    waits for it, trying again with fresh services, until NATS answers or a signal stops
    the process (see `tether.cli.waiting`). A service that can no longer work
    (`Service.wait_lost`: NATS lost for good, say) stops them all and the process with
    exit code 1 and one line saying why, so that its supervisor (systemd, Kubernetes,
    whoever ran `tether dev`) starts a fresh one. A TetherError from a start is raised
    once the services started are stopped.
    """
    lost = asyncio.run(_supervised(services, waiting))
    if lost is not None:
        fail(f"{lost}: exiting so that a fresh process takes over", code=1)


async def _supervised(services: Sequence[Service], waiting: Waiting | None) -> str | None:
    stopping = asyncio.Event()
    started: list[Service] = []

    def signalled() -> None:
        if stopping.is_set():  # a second signal: stop now
            for service in started:
                service.hurry()
        stopping.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled)
    try:
        if waiting is None:
            for service in services:
                await service.start()
                started.append(service)
        else:
            started += await start_waiting(services, waiting, stopping)
        return await _until_stopped_or_lost(stopping, started)
    finally:
        for service in reversed(started):
            await _stop(service)


async def _stop(service: Service) -> None:
    """Stop a service; one that fails to (its connection already closed, as after a
    loss) is reported in a line, and the others are stopped all the same."""
    try:
        await service.stop()
    except Exception as exc:
        log.error("stopping the %s failed: %s", type(service).__name__, exc)


async def _until_stopped_or_lost(stopping: asyncio.Event, services: list[Service]) -> str | None:
    """None on a stop signal; why, when a service can no longer work."""
    waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(stopping.wait())]
    waiters += [asyncio.ensure_future(service.wait_lost()) for service in services]
    done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
    result = done.pop().result()
    return result if isinstance(result, str) else None


# A worker's liveness (see `tether.worker.Liveness`): today's values are the defaults.
BeatEvery = Annotated[
    float, typer.Option(envvar="TETHER_BEAT_EVERY", metavar="S", help="Seconds between beats.")
]
DeadAfter = Annotated[
    float,
    typer.Option(
        envvar="TETHER_DEAD_AFTER", metavar="S", help="Silence before a worker is taken for dead."
    ),
]
LookEvery = Annotated[
    float,
    typer.Option(
        envvar="TETHER_LOOK_EVERY", metavar="S", help="Seconds between looks for lost cancels."
    ),
]
StepSlack = Annotated[
    float,
    typer.Option(
        envvar="TETHER_STEP_SLACK",
        metavar="S",
        help="Seconds a step not yet held waits past its next beat before another worker takes it.",
    ),
]
LoopStall = Annotated[
    float,
    typer.Option(
        envvar="TETHER_LOOP_STALL",
        metavar="S",
        help="Seconds a worker whose event loop is blocked (a tool calling blocking code) "
        "is still answered for as alive before others may take it for dead.",
    ),
]


Grace = Annotated[
    float,
    typer.Option(
        "--grace",
        envvar="TETHER_GRACE",
        metavar="S",
        min=0,
        help="On a stop with --no-drain, or a second signal, seconds running steps get to "
        "finish before they go back to their queues.",
    ),
]


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
    beat_every: BeatEvery = 0.5,
    dead_after: DeadAfter = 2.0,
    look_every: LookEvery = 30.0,
    step_slack: StepSlack = 1.0,
    loop_stall: LoopStall = 20.0,
    grace: Grace = 2.0,
    drain: Annotated[
        bool,
        typer.Option(
            "--drain/--no-drain",
            envvar="TETHER_DRAIN",
            help="On a stop (SIGTERM, Ctrl-C), take no new step and let the running ones "
            "finish, for up to --drain-timeout, before exiting: a rolling deploy re-runs "
            "nothing. A second signal stops at once. With --no-drain, running steps get "
            "--grace, then go back to their queues.",
        ),
    ] = True,
    drain_timeout: Annotated[
        float,
        typer.Option(
            envvar="TETHER_DRAIN_TIMEOUT",
            metavar="S",
            min=0,
            help="The longest a drain lasts; steps still running then go back to their "
            "queues. Keep it under your orchestrator's kill timeout (Kubernetes: "
            "terminationGracePeriodSeconds, 30 s by default).",
        ),
    ] = 25.0,
    build: Annotated[
        str | None,
        typer.Option(
            "--build",
            envvar="TETHER_BUILD",
            metavar="NAME",
            help="The build of the code this worker runs, named on every step it runs "
            "(default: the apps' versions, else a hash of their tools).",
        ),
    ] = None,
) -> None:
    """Serve the tools of one or more apps."""
    from tether.cli.loading import AppLoadError, load_apps
    from tether.worker import Liveness, Worker

    config = nats_config(nats, prefix, "tether-worker", replicas)
    try:
        loaded = load_apps(apps)
        liveness = Liveness(beat_every, dead_after, look_every, step_slack, loop_stall)
        serving = functools.partial(
            Worker,
            loaded,
            config,
            concurrency=concurrency,
            metrics=metrics_on(metrics_port),
            liveness=liveness,
            shutdown_grace=timedelta(seconds=grace),
            drain=timedelta(seconds=drain_timeout) if drain else None,
            build=build,
        )
        first = serving()
    except (AppLoadError, ValueError, DefinitionError) as exc:
        fail(str(exc))
    serve(first, name=config.name, waiting=Waiting(config.safe_url, lambda: [serving()]))


def dispatcher(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    api: Annotated[bool, typer.Option(help="Also answer the request/reply API.")] = True,
    replicas: ReplicasOption = 1,
    metrics_port: MetricsPortOption = None,
    index_repair_every: Annotated[
        float,
        typer.Option(help="Seconds between checks of the status index against the records."),
    ] = 60.0,
) -> None:
    """Accept submitted tasks, hand off their first steps, answer `tether.api.*`."""
    from tether.api import ApiService
    from tether.dispatcher import Dispatcher

    config = nats_config(nats, prefix, "tether-dispatcher", replicas)
    metrics = metrics_on(metrics_port)

    def services() -> list[Service]:
        answering = [ApiService(config, metrics=metrics)] if api else []
        dispatching = Dispatcher(config, metrics=metrics, index_repair_every=index_repair_every)
        return [dispatching, *answering]

    serve(*services(), name=config.name, waiting=Waiting(config.safe_url, services))


def api(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    replicas: ReplicasOption = 1,
) -> None:
    """Answer the request/reply API on `tether.api.*` (discoverable via `$SRV.*`)."""
    from tether.api import ApiService

    config = nats_config(nats, prefix, "tether-api", replicas)
    waiting = Waiting(config.safe_url, lambda: [ApiService(config)])
    serve(ApiService(config), name=config.name, waiting=waiting)


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(dispatcher)
    app.command()(api)
