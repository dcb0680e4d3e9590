"""nats-servers for a run: the 3-node cluster of deploy/nats/cluster-*.conf moved onto
loopback ports and a temp store, or one server with JetStream; each with its monitoring
port, which says when it is healthy and what it holds."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos_runs.processes import ROOT, kill, spawn, terminate
from tether.nats.server import find_nats_server

CLUSTER_CONFS = sorted((ROOT / "deploy" / "nats").glob("cluster-*.conf"))


@dataclass
class Node:
    """One nats-server of the cluster; `start` after `kill` restarts it on its own store."""

    name: str
    conf: Path
    client_port: int
    http_port: int
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    @property
    def log(self) -> Path:
        return self.conf.with_suffix(".log")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running and self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        command = [find_nats_server(), "-c", str(self.conf), "--log", str(self.log)]
        self.process = spawn(command, self.conf.with_suffix(".out"))
        self.starts += 1

    def kill(self) -> None:
        if self.process is not None:
            kill(self.process)

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)

    def healthy(self) -> bool:
        """`/healthz` answers 200 once JetStream is up and current with the cluster."""
        if not self.running:
            return False
        url = f"http://127.0.0.1:{self.http_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def monitor(self, endpoint: str) -> dict[str, Any]:
        """A monitoring endpoint's JSON (`varz`, `jsz`, ...)."""
        url = f"http://127.0.0.1:{self.http_port}/{endpoint}"
        with urllib.request.urlopen(url, timeout=5) as response:
            found: dict[str, Any] = json.load(response)
            return found


@dataclass(frozen=True)
class Load:
    """What the servers hold for their clients, summed over the nodes that run."""

    connections: int
    subscriptions: int
    consumers: int


@dataclass
class Cluster:
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def from_deploy(cls, base: Path, confs: Sequence[Path] = CLUSTER_CONFS) -> Cluster:
        """The deploy configs with their ports, hosts and store dir moved under `base`."""
        names = [_setting(path.read_text(), "server_name") for path in confs]
        free = free_ports(3 * len(names))
        ports = {name: tuple(free[3 * i : 3 * i + 3]) for i, name in enumerate(names)}
        nodes = []
        for name, conf in zip(names, confs, strict=True):
            client, route, http = ports[name]
            local = _local_config(conf.read_text(), base / name, client, route, http, ports)
            nodes.append(Node(name, local, client, http))
        return cls(nodes)

    @classmethod
    def single(cls, base: Path) -> Cluster:
        """One nats-server with JetStream on loopback, its store under `base`."""
        client, http = free_ports(2)
        target = base / "nats-server"
        target.mkdir(parents=True)
        conf = target / "server.conf"
        conf.write_text(
            f"listen: 127.0.0.1:{client}\nhttp_port: {http}\n"
            f'jetstream {{ store_dir: "{target / "data"}" }}\n'
        )
        return cls([Node("nats-server", conf, client, http)])

    @property
    def url(self) -> str:
        """Every node's URL: a client given all three fails over to the others."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def pids(self) -> dict[str, int]:
        return {node.name: node.pid for node in self.nodes if node.pid is not None}

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def load(self) -> Load:
        running = [node for node in self.nodes if node.running]
        varz = [node.monitor("varz") for node in running]
        # Each node's /jsz counts the cluster's consumers: one node's answer is the total.
        jsz = running[0].monitor("jsz") if running else {}
        return Load(
            connections=sum(v["connections"] for v in varz),
            subscriptions=sum(v["subscriptions"] for v in varz),
            consumers=int(jsz.get("consumers", 0)),
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    async def wait_healthy(self, nodes: Sequence[Node] | None = None, timeout: float = 60) -> float:
        """Seconds until every node in `nodes` (all by default) is healthy."""
        waiting = list(nodes or self.nodes)
        started = time.monotonic()
        while True:
            health = await asyncio.gather(*(asyncio.to_thread(n.healthy) for n in waiting))
            if all(health):
                return time.monotonic() - started
            for node in waiting:
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(f"{node.name} exited: see {node.log}")
            if time.monotonic() - started > timeout:
                sick = [n.name for n, ok in zip(waiting, health, strict=True) if not ok]
                raise TimeoutError(f"{sick} not healthy within {timeout:.0f}s")
            await asyncio.sleep(0.2)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _setting(text: str, key: str) -> str:
    match = re.search(rf"^\s*{key}\s*[:=]\s*(\S+)\s*$", text, flags=re.MULTILINE)
    if match is None:
        raise ValueError(f"no {key!r} in the cluster config")
    return match.group(1)


def _sub_once(pattern: str, replacement: str, text: str) -> str:
    replaced, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    if count != 1:
        raise ValueError(f"expected {pattern!r} once in a cluster config, found it {count} times")
    return replaced


def _local_config(
    text: str,
    target: Path,
    client: int,
    route: int,
    http: int,
    ports: dict[str, tuple[int, ...]],
) -> Path:
    """The config text with its listeners on loopback, its store under `target` and its
    routes pointing at the other nodes' loopback route ports (comments dropped: they
    name hosts too)."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = _sub_once(r"^listen:\s*\S+", f"listen: 127.0.0.1:{client}", text)
    text = _sub_once(r"^([ \t]+)listen:\s*\S+", rf"\g<1>listen: 127.0.0.1:{route}", text)
    text = _sub_once(r"^http_port:\s*\d+", f"http_port: {http}", text)
    text = _sub_once(r"^([ \t]*)store_dir:\s*\S+", rf'\g<1>store_dir: "{target / "data"}"', text)
    for name, (_, other_route, _) in ports.items():
        text = _sub_once(rf"://{re.escape(name)}:\d+", f"://127.0.0.1:{other_route}", text)
    target.mkdir(parents=True)
    path = target / "server.conf"
    path.write_text(text)
    return path
