"""Each peer as the harness runs it: its servers, its worker process (killed and
restarted by the crash scenarios), its client command and how to read what it stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.bench.peers.install import PEERS
from tests.bench.peers.servers import (
    ModelServer,
    Nats,
    Postgres,
    Restate,
    Server,
    Temporal,
    free_port,
    prometheus_sum,
    wait_for,
)

RUNNERS = Path(__file__).parent / "runners"


class Stack:
    """One peer: servers up, a worker serving the agent, a client command to run."""

    name = ""
    label = ""
    script = ""
    live_stream = True
    """Whether a client sees the answer's text while the model writes it."""
    ready = b'"event": "ready"'
    """What the worker's log says once it serves."""
    counted = "not counted"
    """What `server_messages` counts (the approval scenario)."""

    def __init__(self, folder: Path, model: ModelServer) -> None:
        self.folder = folder
        self.model = model
        self.tool_log = folder / "tools.jsonl"
        self.servers: list[Server] = []
        self.worker: subprocess.Popen[bytes] | None = None
        self.workers_started = 0

    @property
    def python(self) -> str:
        return str(PEERS[self.name].python)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "OPENAI_BASE_URL": self.model.url,
            "OPENAI_API_KEY": "bench",
            "BENCH_TOOL_LOG": str(self.tool_log),
            "PYTHONPATH": str(RUNNERS),
            "PYTHONUNBUFFERED": "1",
        }

    def start(self) -> None:
        """Servers, then a worker."""

    def worker_args(self) -> list[str] | None:
        return None

    def client_args(self) -> list[str]:
        raise NotImplementedError

    def client_command(self) -> list[str]:
        return [self.python, str(RUNNERS / self.script), "client", *self.client_args()]

    def start_worker(self) -> None:
        args = self.worker_args()
        if args is None:
            return
        self.workers_started += 1
        log = self.folder / f"worker-{self.workers_started}.log"
        with log.open("ab") as out:
            self.worker = subprocess.Popen(
                [self.python, str(RUNNERS / self.script), "worker", *args],
                stdout=out,
                stderr=out,
                env=self.env(),
                cwd=RUNNERS,
                start_new_session=True,
            )
        wait_for(
            lambda: self.ready in log.read_bytes(),
            f"the {self.label} worker",
            self.worker,
            log,
            120,
        )

    def kill_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()

    @property
    def server_pids(self) -> list[int]:
        return [s.pid for s in self.servers]

    @property
    def worker_pids(self) -> list[int]:
        return [self.worker.pid] if self.worker is not None else []

    def stored_bytes(self, run: str) -> int | None:
        """What the peer has stored, for the growth scenario (None: stores nothing)."""
        return None

    def server_messages(self) -> int | None:
        """A running count of what the server exchanges (messages or requests)."""
        return None

    def stop(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.terminate()
            try:
                self.worker.wait(15)
            except subprocess.TimeoutExpired:
                self.kill_worker()
        for server in reversed(self.servers):
            server.stop()


class Bare(Stack):
    name, label, script = "bare", "bare (no durability)", "run_bare.py"

    def client_args(self) -> list[str]:
        return []


class Tether(Stack):
    name, label, script = "tether", "Tether + Pydantic AI (app.add)", "run_tether.py"
    agent = "bench_pai"
    ready = b" serving "  # `tether worker` logs "worker ... serving <tools>"
    counted = "NATS messages in + out"

    @property
    def python(self) -> str:
        return sys.executable  # this checkout is the code under test

    def start(self) -> None:
        self.nats = Nats(self.folder)
        self.servers.append(self.nats)
        command = [sys.executable, "-m", "tether.cli", "dispatcher", "--nats", self.nats.url]
        self.servers.append(Server("dispatcher", command, self.folder))  # takes the submissions
        self.start_worker()

    def worker_args(self) -> list[str]:
        return [self.nats.url]

    def client_args(self) -> list[str]:
        return [self.nats.url, self.agent]

    def stored_bytes(self, run: str) -> int | None:
        with urllib.request.urlopen(f"{self.nats.monitor}/jsz", timeout=5) as response:
            return int(json.load(response)["bytes"])

    def server_messages(self) -> int | None:
        with urllib.request.urlopen(f"{self.nats.monitor}/varz", timeout=5) as response:
            varz = json.load(response)
        return int(varz["in_msgs"] + varz["out_msgs"])


class TetherNative(Tether):
    name, label = "tether-native", "Tether Agent (its own)"
    agent = "bench_native"


class TemporalStack(Stack):
    name, label, script = "temporal", "Temporal + Pydantic AI", "run_temporal.py"
    counted = "requests its services handle (`service_requests`)"

    def server_messages(self) -> int | None:
        return prometheus_sum(
            f"http://127.0.0.1:{self.server.metrics_port}/metrics", "service_requests{"
        )

    def start(self) -> None:
        self.server = Temporal(self.folder)
        self.servers.append(self.server)
        self.start_worker()

    def worker_args(self) -> list[str]:
        return [self.server.address]

    def client_args(self) -> list[str]:
        return [self.server.address]

    def stored_bytes(self, run: str) -> int | None:
        command = [str(self.server.binary), "workflow", "describe", "-w", run]
        command += ["--address", self.server.address, "-o", "json"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            return None
        info = json.loads(done.stdout).get("workflowExecutionInfo", {})
        return int(info.get("historySizeBytes", 0))


class DbosStack(Stack):
    name, label, script = "dbos", "DBOS + Pydantic AI", "run_dbos.py"
    counted = "PostgreSQL transactions (`pg_stat_database`)"

    def server_messages(self) -> int | None:
        text = self.postgres.query(
            "select sum(xact_commit + xact_rollback) from pg_stat_database", "postgres"
        )
        return int(text) if text.isdigit() else None

    def start(self) -> None:
        self.postgres = Postgres(self.folder)
        self.servers.append(self.postgres)
        self.start_worker()

    def worker_args(self) -> list[str]:
        return [self.postgres.url]

    def client_args(self) -> list[str]:
        return [self.postgres.url]

    def stored_bytes(self, run: str) -> int | None:
        """The rows DBOS keeps for the run: its status, each step's output, its stream."""
        tables = ("workflow_status", "operation_outputs", "streams")
        parts = [
            f"(select coalesce(sum(pg_column_size(t.*)), 0) from dbos.{table} t "
            f"where workflow_uuid = '{run}')"
            for table in tables
        ]
        text = self.postgres.query("select " + " + ".join(parts))
        return int(text) if text.isdigit() else None


class RestateStack(Stack):
    name, label, script = "restate", "Restate + Pydantic AI", "run_restate.py"
    counted = "records committed to its log (`restate_bifrost_sequencer_committed_records_total`)"

    def server_messages(self) -> int | None:
        url = f"http://127.0.0.1:{self.server.node_port}/metrics"
        return prometheus_sum(url, "restate_bifrost_sequencer_committed_records_total")

    live_stream = False

    def start(self) -> None:
        self.server = Restate(self.folder)
        self.servers.append(self.server)
        self.port = free_port()
        self.start_worker()

    def worker_args(self) -> list[str]:
        return [self.server.admin, str(self.port)]

    def client_args(self) -> list[str]:
        return [self.server.ingress]

    def stored_bytes(self, run: str) -> int | None:
        """The journal of the run's invocation, as Restate's SQL introspection sizes it."""
        sql = (
            "select sum(j.raw_length) as bytes from sys_journal j "
            f"join sys_invocation i on j.id = i.id where i.idempotency_key = '{run}'"
        )
        request = urllib.request.Request(
            f"{self.server.admin}/query",
            data=json.dumps({"query": sql}).encode(),
            headers={"content-type": "application/json", "accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                rows = json.load(response).get("rows", [])
        except OSError:
            return None
        return int(rows[0].get("bytes") or 0) if rows else None  # no journal yet: no key


STACKS: dict[str, type[Stack]] = {
    "bare": Bare,
    "tether": Tether,
    "tether-native": TetherNative,
    "temporal": TemporalStack,
    "dbos": DbosStack,
    "restate": RestateStack,
}
