"""`tether dev` (everything on a laptop) and `tether demo` (the crash story).

The roles (FastStream, MCP, uvicorn) are imported inside the commands: every `tether`
command loads this module, and most of them need none of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import shutil
import signal
import tempfile
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.cli.common import (
    DEFAULT_GATEWAY_PORT,
    DEFAULT_UI_PORT,
    PrefixOption,
    fail,
    nats_config,
)
from tether.cli.processes import supervise
from tether.errors import TetherError
from tether.service import Service

if TYPE_CHECKING:
    from rich.console import Console

    from tether.local_model import LlamaServer
    from tether.nats.connection import NatsConfig
    from tether.nats.server import NatsServer
    from tether.tools import App
    from tether.tools.tool import Tool

DEMO_APP = "tether.demo.research:app"
DEV_PORT = 4222
DATA_DIR = Path(".tether")
EXIT_CHECK_EVERY = 0.25
"""Seconds between looks at whether the embedded nats-server's process still runs."""


class _ServerWatch(Service):
    """Lost when the embedded nats-server's process ends: every role would otherwise wait
    for it for ever (nats-py reconnects without end), and nothing would restart it. The
    server itself is started and stopped around the services (`_nats`)."""

    def __init__(self, server: NatsServer) -> None:
        self.server = server
        self._watching: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._watching = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        pid = self.server.pid
        # Looked at now and then: nothing portable wakes an await when a child exits
        # and still leaves the child for NatsServer's Popen to reap.
        while True:
            await asyncio.sleep(EXIT_CHECK_EVERY)
            if not self.server.running:
                break
        log = self.server.log_file
        self.connection_lost(f"the embedded nats-server (PID {pid}, log {log}) is gone")

    async def stop(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watching


class _Banner(Service):
    """What runs where: the last service, so it is printed once everything serves, and
    its "stopping..." before anything stops."""

    def __init__(self, console: Console, text: Callable[[], str]) -> None:
        self.console = console
        self.text = text

    async def start(self) -> None:
        self.console.print(self.text(), soft_wrap=True)

    async def stop(self) -> None:
        self.console.print("\nstopping...")


@contextlib.contextmanager
def _nats(url: str | None, data_dir: Path, port: int) -> Iterator[tuple[str, NatsServer | None]]:
    """The given URL, or an embedded nats-server's (running until the block ends), which
    takes the token kept in `data_dir` (see `tether.nats.embedded`)."""
    from tether.nats.server import NatsServer, NatsServerError

    if url:
        yield url, None
        return
    try:
        server = NatsServer.embedded(data_dir, port=port)
    except NatsServerError as exc:
        fail(str(exc))
    try:
        server.start()
    except NatsServerError as exc:
        fail(f"{exc} (is port {port} in use? pass --port 0 for a free one)")
    try:
        yield server.url, server
    finally:
        server.stop()


def _services(
    apps: list[App],
    config: NatsConfig,
    server: NatsServer | None,
    concurrency: int,
    gateway_port: int | None,
    ui_port: int | None,
) -> list[Service]:
    """The roles of `tether dev`, in the order they start, the banner last."""
    from rich.console import Console

    from tether.api import ApiService
    from tether.dispatcher import Dispatcher
    from tether.gateway import Gateway
    from tether.ui import Dashboard
    from tether.worker import Worker

    worker = Worker(apps, config, concurrency=concurrency)
    gateway = Gateway(config, port=gateway_port) if gateway_port is not None else None
    dashboard = Dashboard(config, port=ui_port) if ui_port is not None else None
    where = "external" if server is None else f"embedded, data in {server.store_dir}"

    def banner() -> str:
        lines = [
            f"[bold]Tether dev[/]\n  NATS        [cyan]{config.url}[/] ({where})",
            f"  dispatcher  running; API on {config.names.api_subject('*')}",
            f"  worker      {', '.join(worker.tools)}",
        ]
        if gateway is not None:
            lines.append(f"  MCP         [cyan]{gateway.url}[/] (Streamable HTTP, tasks)")
        if dashboard is not None:
            lines.append(f"  dashboard   [cyan]{dashboard.url}[/]")
        lines.append(f"\nTry: {_elsewhere(server)}{_example(config.url, worker.tools)}")
        lines.append("Ctrl-C stops everything; tasks wait in JetStream for the next start.")
        return "\n".join(lines)

    watch = [_ServerWatch(server)] if server is not None else []
    roles = [Dispatcher(config), ApiService(config), worker, gateway, dashboard]
    return [*watch, *(role for role in roles if role is not None), _Banner(Console(), banner)]


def _supervise_dev(services: list[Service]) -> None:
    """`supervise`, with what to do about an HTTP port that is taken."""
    from tether.gateway import GatewayError
    from tether.ui import DashboardError

    try:
        supervise(services)
    except GatewayError as exc:
        fail(f"{exc}: pass another --gateway-port (0 for a free one), or --no-gateway")
    except DashboardError as exc:
        fail(f"{exc}: pass another --ui-port (0 for a free one), or --no-ui")
    except TetherError as exc:
        fail(str(exc))


def _elsewhere(server: NatsServer | None) -> str:
    """How the CLI finds an embedded server whose data is not in `.tether/`."""
    data_dir = None if server is None else server.store_dir.parent
    if data_dir is None or data_dir == DATA_DIR:
        return ""
    return f"TETHER_DATA_DIR={shlex.quote(str(data_dir))} "


def _example(nats_url: str, tools: Mapping[str, Tool]) -> str:
    """A submit line for the banner that works with what this worker serves: an agent
    asked a question, else a tool given an input its schema accepts."""
    env = "" if nats_url == f"nats://127.0.0.1:{DEV_PORT}" else f"TETHER_NATS_URL={nats_url} "
    agents = [tool.name for tool in tools.values() if tool.agent]
    if agents:
        steps = f"--agent {agents[0]} 'What can you do?'"
    elif {"search", "summarize", "write_report"} <= set(tools):
        steps = '\'search={"query":"durable agents"}\' summarize write_report'
    else:
        from tether.cli.asking import example_value  # the wire schemas: only here

        tool = next(iter(tools.values()))
        value = example_value(tool.input_schema()) if tool.takes_input else None
        from tether.schemas.codec import encode

        step = tool.name if value is None else f"{tool.name}={encode(value).decode()}"
        steps = shlex.quote(step)
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
        Path,
        typer.Option(
            metavar="DIR",
            envvar="TETHER_DATA_DIR",
            help="Where the embedded server keeps its data and token (made 0700).",
        ),
    ] = DATA_DIR,
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
    from tether.cli.loading import AppLoadError, load_apps

    try:
        loaded = load_apps(apps or [DEMO_APP])
    except AppLoadError as exc:
        fail(str(exc))
    with _nats(nats, data_dir, port if port else -1) as (url, server):
        config = nats_config(url, prefix, "tether-dev")
        if server is not None:
            config = dataclasses.replace(config, token=server.token)
        ports = (gateway_port if gateway else None, ui_port if ui else None)
        _supervise_dev(_services(loaded, config, server, concurrency, *ports))


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
            metavar="NAME",
            help="A real model instead of the offline one (OpenAI's needs OPENAI_API_KEY; a "
            "local server with --base-url needs none).",
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Its OpenAI-compatible endpoint (default: OPENAI_BASE_URL or OpenAI).",
        ),
    ] = None,
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help="On SmolLM2-135M served here, no key needed (installed first if missing: "
            "see `tether model install`).",
        ),
    ] = False,
    keep: Annotated[bool, typer.Option(help="Keep the demo's nats-server data.")] = False,
) -> None:
    """Run an agent, kill its worker with SIGKILL mid-fan-out, watch it finish and stream."""
    from rich.console import Console

    from tether.demo.story import Demo
    from tether.nats.server import NatsServerError

    if base_url is not None and model is None:
        fail("--base-url needs --model: name the model the endpoint serves")
    if local and (model or base_url):
        fail("--local serves its own model: leave out --model and --base-url")
    data_dir = Path(tempfile.mkdtemp(prefix="tether-demo-"))
    llama = _local_model(data_dir) if local else None
    if llama is not None:
        model, base_url = llama.name, llama.base_url
    demo_run = Demo(Console(), data_dir, out_dir.resolve(), pace, model, base_url)
    try:
        code = asyncio.run(_until_signalled(demo_run.run()))
    except (TetherError, NatsServerError) as exc:
        fail(str(exc))
    finally:
        if llama is not None:
            llama.stop()
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    raise typer.Exit(code)


def _local_model(data_dir: Path) -> LlamaServer:
    """The local model, installed if missing, started on a free port for the demo."""
    from tether.cli.model import started
    from tether.local_model import THREADS, install

    try:
        install(typer.echo)
        return started(data_dir / "llama-server.log", None, THREADS)
    except RuntimeError as exc:
        fail(str(exc))


async def _until_signalled(run: Coroutine[Any, Any, int]) -> int:
    """Run the demo; SIGTERM or Ctrl-C cancels it, so that on the way out it stops every
    process it started (nats-server, the model, its workers, in their own session so a
    Ctrl-C does not kill them mid-story). Python's default SIGTERM ends the process at
    once and would leave them all running. Returns 128 + the signal's number then."""
    story = asyncio.ensure_future(run)
    loop = asyncio.get_running_loop()
    signalled: list[int] = []

    def stop(number: int) -> None:
        signalled.append(number)
        story.cancel()

    stops = (signal.SIGTERM, signal.SIGINT)
    for number in stops:
        loop.add_signal_handler(number, stop, number)
    try:
        return await story
    except asyncio.CancelledError:
        if not signalled:
            raise
        typer.echo("stopped: the demo's nats-server, model and worker are stopped", err=True)
        return 128 + signalled[0]
    finally:
        for number in stops:
            loop.remove_signal_handler(number)


def register(app: typer.Typer) -> None:
    app.command()(dev)
    app.command()(demo)
