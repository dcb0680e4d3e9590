"""A nats-server started from a config file of the test's own (TLS, users, roles), ready
once its monitoring endpoint says JetStream is up."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tether.nats.server import find_nats_server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class ConfiguredServer:
    port: int
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def configured_server(
    directory: Path, settings: str, timeout: float = 20.0
) -> Iterator[ConfiguredServer]:
    """nats-server on a free port with JetStream in `directory` and `settings` (config
    text: `tls {...}`, `authorization {...}`, `accounts {...}`) added."""
    port, http = free_port(), free_port()
    conf = directory / "server.conf"
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\nhttp: "127.0.0.1:{http}"\n'
        f'jetstream {{ store_dir: "{directory / "js"}" }}\n{settings}\n'
    )
    log = directory / "server.log"
    with running_server(conf, http, log, timeout):
        yield ConfiguredServer(port, log)


@contextlib.contextmanager
def running_server(conf: Path, http: int, log: Path, timeout: float = 20.0) -> Iterator[None]:
    """nats-server from `conf` (whose monitor listens on `http`), up until the block ends."""
    process = subprocess.Popen(
        [find_nats_server(), "-c", str(conf), "--log", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(http):
            if process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace") if log.exists() else ""
                raise AssertionError(f"nats-server did not start from {conf.name}:\n{text[-2000:]}")
            time.sleep(0.05)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _healthy(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False
