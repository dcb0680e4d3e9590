"""`tether dev` (everything on a laptop) and `tether demo` (the crash story).

The roles (FastStream, MCP, uvicorn) are imported inside the commands: every `tether`
command loads this module, and most of them need none of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console

from tether.cli.common import (
    DEFAULT_GATEWAY_PORT,
    DEFAULT_UI_PORT,
    PrefixOption,
    fail,
    nats_config,
)
from tether.cli.loading import AppLoadError, load_app
from tether.errors import TetherError
from tether.nats.server import NatsServer, NatsServerError
from tether.service import Service

if TYPE_CHECKING:
    from tether.worker import App

S = TypeVar("S", bound=Service)

DEMO_APP = "tether.demo.research:app"
DEV_PORT = 4222


@contextlib.asynccontextmanager
async def _nats_url(url: str | None, data_dir: Path, port: int) -> AsyncIterator[tuple[str, str]]:
    """The given URL, or an embedded nats-server's; with a description for the banner."""
    if url:
        yield url, "external"
        return
    server = NatsServer(data_dir / "nats", port=port)
    try:
        server.start()
    except NatsServerError as exc:
        fail(f"{exc} (is port {port} in use? pass --port 0 for a free one)")
    try:
        yield server.url, f"embedded, data in {data_dir / 'nats'}"
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def _listening(
    make: Callable[[int], S], port: int | None, option: str, off: str
) -> AsyncIterator[S | None]:
    """The HTTP service `make(port)` makes (port 0: a free one), or none when `port` is None."""
    if port is None:
        yield None
        return
    service = make(port)
    try:
        await service.start()
    except TetherError as exc:
        fail(f"{exc}: pass another {option} (0 for a free one), or {off}")
    try:
        yield service
    finally:
        await service.stop()


async def _dev(
    apps: list[App],
    url: str | None,
    prefix: str,
    data_dir: Path,
    port: int,
    concurrency: int,
    gateway_port: int | None,
    ui_port: int | None,
) -> None:
    from tether.api import ApiService
    from tether.dispatcher import Dispatcher
    from tether.gateway import Gateway
    from tether.ui import Dashboard
    from tether.worker import Worker

    console = Console()
    async with _nats_url(url, data_dir, port) as (nats_url, where):
        config = nats_config(nats_url, prefix, "tether-dev")
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        async with (
            Dispatcher(config),
            ApiService(config),
            Worker(apps, config, concurrency=concurrency) as worker,
            _listening(
                lambda port: Gateway(config, port=port),
                gateway_port,
                "--gateway-port",
                "--no-gateway",
            ) as gateway,
            _listening(
                lambda port: Dashboard(config, port=port), ui_port, "--ui-port", "--no-ui"
            ) as dashboard,
        ):
            console.print(f"[bold]Tether dev[/]\n  NATS        [cyan]{nats_url}[/] ({where})")
            console.print(f"  dispatcher  running; API on {config.names.api_subject('*')}")
            console.print(f"  worker      {', '.join(worker.tools)}")
            if gateway is not None:
                console.print(f"  MCP         [cyan]{gateway.url}[/] (Streamable HTTP, tasks)")
            if dashboard is not None:
                console.print(f"  dashboard   [cyan]{dashboard.url}[/]")
            console.print(f"\nTry: {_example(nats_url, worker.tools)}", soft_wrap=True)
            console.print("Ctrl-C stops everything; tasks wait in JetStream for the next start.")
            await stopping.wait()
            console.print("\nstopping...")


def _example(nats_url: str, tools: Collection[str]) -> str:
    """A submit line for the banner that names tools this worker serves."""
    env = "" if nats_url == f"nats://127.0.0.1:{DEV_PORT}" else f"TETHER_NATS_URL={nats_url} "
    if {"search", "summarize", "write_report"} <= set(tools):
        steps = '\'search={"query":"durable agents"}\' summarize write_report'
    else:
        steps = next(iter(tools))
    return f"{env}tether submit {steps} --wait"


def dev(
    apps: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="MODULE:ATTR...",
            help="Apps to serve (MODULE:ATTR); default: the demo research agent.",
        ),
    ] = None,
    nats: Annotated[
        str | None,
        typer.Option(
            "--nats",
            envvar="TETHER_NATS_URL",
            help="Use this NATS server instead of embedding one.",
        ),
    ] = None,
    prefix: PrefixOption = "tether",
    data_dir: Annotated[
        Path, typer.Option(metavar="DIR", help="Where the embedded server keeps its data.")
    ] = Path(".tether"),
    port: Annotated[
        int, typer.Option(metavar="PORT", help="Port of the embedded server (0: a free one).")
    ] = DEV_PORT,
    concurrency: Annotated[
        int, typer.Option(metavar="N", help="Steps run at once, per tool.")
    ] = 32,
    gateway_port: Annotated[
        int, typer.Option(metavar="PORT", help="Port of the MCP gateway (0: a free one).")
    ] = DEFAULT_GATEWAY_PORT,
    gateway: Annotated[bool, typer.Option(help="Serve the MCP gateway.")] = True,
    ui_port: Annotated[
        int, typer.Option(metavar="PORT", help="Port of the dashboard (0: a free one).")
    ] = DEFAULT_UI_PORT,
    ui: Annotated[bool, typer.Option(help="Serve the dashboard.")] = True,
) -> None:
    """Run an embedded nats-server, the dispatcher, workers, the MCP gateway and the
    dashboard in one process."""
    try:
        loaded = [load_app(spec) for spec in apps or [DEMO_APP]]
    except AppLoadError as exc:
        fail(str(exc))
    mcp_port = gateway_port if gateway else None
    dashboard_port = ui_port if ui else None
    try:
        asyncio.run(
            _dev(
                loaded,
                nats,
                prefix,
                data_dir,
                port if port else -1,
                concurrency,
                mcp_port,
                dashboard_port,
            )
        )
    except TetherError as exc:
        fail(str(exc))


def demo(
    out_dir: Annotated[
        Path, typer.Option(metavar="DIR", help="Where the report is written.")
    ] = Path("tether-reports"),
    pace: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds of pretend work per document.")
    ] = 0.15,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="A real model instead of the offline one (needs OPENAI_API_KEY)."
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Its OpenAI-compatible endpoint (default: OPENAI_BASE_URL or OpenAI).",
        ),
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the demo's nats-server data.")] = False,
) -> None:
    """Run an agent, kill its worker with SIGKILL mid-fan-out, watch it finish and stream."""
    from tether.demo.story import Demo

    if base_url is not None and model is None:
        fail("--base-url needs --model: name the model the endpoint serves")
    data_dir = Path(tempfile.mkdtemp(prefix="tether-demo-"))
    demo_run = Demo(Console(), data_dir, out_dir.resolve(), pace, model, base_url)
    try:
        code = asyncio.run(demo_run.run())
    except (TetherError, NatsServerError) as exc:
        fail(str(exc))
    finally:
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command()(dev)
    app.command()(demo)
