"""Fixtures: a real nats-server per test module, isolated names per test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from tests.apps.mcp_server import McpServer
from tether import App, Client, Dispatcher, Layout, NatsConfig, Worker
from tether.api import ApiService
from tether.nats.connection import close, connect
from tether.nats.store import Store
from tether.schemas.names import Names
from tether.testing import nats_server_url
from tether.testing.llm import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.tools:app"


def _print_tasks(signum: int, frame: object) -> None:
    """Where every asyncio task of the running loop waits, printed to stderr."""
    loop = asyncio._get_running_loop()
    print(f"--- asyncio tasks {'' if loop else '(no running loop)'}", file=sys.stderr)
    for task in asyncio.all_tasks(loop) if loop else ():
        print(f"{task!r}", file=sys.stderr)
        awaited = task.get_coro()
        while awaited is not None:  # the whole chain of awaits, not only the outer frame
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
            if frame is not None:
                print(
                    f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}",
                    file=sys.stderr,
                )
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """A test about to hit pytest-timeout first prints where its tasks wait: a hang in
    an awaited call shows only the event loop's `select` in the timeout's own report."""
    limit = float(item.config.getini("timeout") or 0)
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else limit
    if limit <= 10 or threading.current_thread() is not threading.main_thread():
        return (yield)
    previous = signal.signal(signal.SIGUSR2, _print_tasks)
    timer = threading.Timer(limit - 5, os.kill, (os.getpid(), signal.SIGUSR2))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR2, previous)


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with nats_server_url(tmp_path_factory.mktemp("nats")) as url:
        yield url


@pytest.fixture
def prefix() -> str:
    """A fresh prefix: every test gets its own streams and buckets on the shared server."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def config(nats_url: str, prefix: str) -> NatsConfig:
    return NatsConfig(url=nats_url, names=Names(prefix=prefix))


INLINE_ONLY = 2**40
"""A blob threshold no value reaches: every value travels inline (blobs off)."""


def inline_only(config: NatsConfig) -> Layout:
    """The layout of `config` with blobs off, for the limits of values carried inline
    (which still bound whatever is not offloaded, and deployments that turn blobs off)."""
    return Layout(names=config.names, blob_threshold=INLINE_ONLY)


@pytest.fixture
async def client(config: NatsConfig) -> AsyncIterator[Client]:
    async with Client(config) as c:
        yield c


@pytest.fixture
async def store(client: Client) -> AsyncIterator[Store]:
    """The test's installation as its `client` lays it out, on a connection of the
    test's own: what tests read and write under the client, without its private store."""
    nc = await connect(client.nats)
    try:
        yield await Store.open(nc, client.layout, provision=False)  # the client provisioned
    finally:
        await close(nc)


MakeWorker = Callable[..., Awaitable[Worker]]
"""`await make_worker(app, **options)`: a started `Worker` (any of its keyword options)."""


@pytest.fixture
async def make_worker(config: NatsConfig) -> AsyncIterator[MakeWorker]:
    """Start in-process workers on the test's server: `await make_worker(app,
    concurrency=1)`. Every worker made is stopped at teardown, the last first, whether
    the test passed or failed (a stop that raises does not skip the others)."""
    async with contextlib.AsyncExitStack() as started:

        async def make(apps: App | Sequence[App], **options: Any) -> Worker:
            return await started.enter_async_context(Worker(apps, config, **options))

        yield make


@dataclass(frozen=True)
class Raw:
    """A plain nats-py connection of the test's own: no Tether code between it and the wire,
    as a client in any language would have."""

    nc: NATS
    js: JetStreamContext


@contextlib.asynccontextmanager
async def raw_connection(url: str) -> AsyncIterator[Raw]:
    """A `Raw` connection to `url`, closed on the way out (for tests with their own server)."""
    nc = await nats.connect(url)
    try:
        yield Raw(nc=nc, js=nc.jetstream())
    finally:
        await nc.close()


@pytest.fixture
async def raw(config: NatsConfig) -> AsyncIterator[Raw]:
    """A raw connection to the test's server: publish bytes, read stream and consumer info."""
    async with raw_connection(config.url) as r:
        yield r


@pytest.fixture
async def dispatcher(config: NatsConfig) -> AsyncIterator[Dispatcher]:
    async with Dispatcher(config) as d:
        yield d


@pytest.fixture
async def api(config: NatsConfig) -> AsyncIterator[ApiService]:
    """The request/reply API, answering by the time the fixture yields."""
    async with ApiService(config) as service:
        yield service


@pytest.fixture
async def registered(config: NatsConfig) -> None:
    """The test tools registered (as a worker does at start) with no worker left running."""
    from tests.apps.tools import app

    async with Worker(app, config):
        pass


@pytest.fixture
def executions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A side file where test tools append one line per execution (also in subprocesses)."""
    path = tmp_path / "executions.log"
    path.touch()
    monkeypatch.setenv("TETHER_TEST_EXECUTIONS", str(path))
    return path


def start_worker(
    config: NatsConfig,
    *apps: str,
    log: Path,
    concurrency: int = 32,
    entry: list[str] | None = None,
    drain: bool = False,
) -> subprocess.Popen[bytes]:
    """`tether worker` as a real child process (kill -9 tests need a real process).

    `entry` replaces `python -m tether.cli`, e.g. with a wrapper that injects a crash.
    Without `drain` it runs with `--no-drain`, so that a stop mid-step is quick.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = entry or [sys.executable, "-m", "tether.cli"]
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                *command,
                "worker",
                *apps,
                "--nats",
                config.url,
                "--prefix",
                config.names.prefix,
                "--concurrency",
                str(concurrency),
                *([] if drain else ["--no-drain"]),
            ],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )


def stop_worker(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM and wait. A graceful stop is bounded (grace, then release), so one that
    outlasts `timeout` is a bug: the process is killed, then the test fails."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"the worker did not stop within {timeout:.0f}s of SIGTERM") from None


@pytest.fixture
async def agent_worker(make_worker: MakeWorker, model: ScriptedModel) -> Worker:
    """A worker in this process serving the test agents (`tests/apps/agents.py`), on the
    scripted model."""
    from tests.apps.agents import app

    return await make_worker(app)


@pytest.fixture
async def sdk_client() -> AsyncIterator[None]:
    """For tests that run OpenAI Agents SDK agents in this process: the SDK shares one
    httpx client per process, bound to the event loop it was first used on, so it is
    closed after the test and the next test's loop gets its own."""
    yield
    import agents.models.openai_provider as provider

    if provider._http_client is not None:
        await provider._http_client.aclose()
        provider._http_client = None


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    """The test MCP server (tests/apps/mcp_server.py), its own process, at
    $TETHER_TEST_MCP_SERVERS for the module (so workers started as subprocesses find it)."""
    with McpServer(tmp_path_factory.mktemp("mcp")) as running, pytest.MonkeyPatch.context() as env:
        env.setenv("TETHER_TEST_MCP_SERVERS", running.url)
        yield running


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    """The scripted OpenAI-compatible model, its own process, at $OPENAI_BASE_URL for the
    module (so workers started as subprocesses find it); tests `load` their script."""
    with ScriptedModel() as scripted, pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_BASE_URL", scripted.base_url)
        yield scripted
