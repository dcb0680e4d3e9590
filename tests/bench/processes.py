"""The bench's node processes, and what /proc says of their CPU time and memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Node:
    """A node process (see tests/bench/nodes.py): a Tether worker or dispatcher, or the
    baseline's handlers."""

    def __init__(
        self, kind: str, url: str, concurrency: int, env: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.nodes", kind, url, str(concurrency)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}/services:{ROOT}", **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the {kind} node did not start")

    def peak_memory_mb(self) -> float:
        return memory_kb(self.process.pid, "VmHWM") / 1024

    def memory_kb(self) -> int:
        """Resident memory now (VmRSS)."""
        return memory_kb(self.process.pid, "VmRSS")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class CpuTime:
    """CPU seconds that the server, the workers (or the baseline's handlers) and the
    dispatcher spend in a block: steadier than wall time on a shared machine."""

    def __init__(self, server: int | None, workers: list[Node], dispatcher: Node | None = None):
        self.pids = {
            "server": [server] if server else [],
            "workers": [n.process.pid for n in workers],
            "dispatcher": [dispatcher.process.pid] if dispatcher else [],
        }
        self.used: dict[str, float] = {}

    def __enter__(self) -> CpuTime:
        self.used = {role: -cpu_seconds(pids) for role, pids in self.pids.items()}
        return self

    def __exit__(self, *exc: object) -> None:
        for role, pids in self.pids.items():
            self.used[role] += cpu_seconds(pids)

    def per_task(self, tasks: int) -> dict[str, float]:
        """CPU ms per task, by process role (roles without a process are left out)."""
        return {
            f"cpu_ms_per_task_{role}": self.used[role] * 1000 / tasks
            for role, pids in self.pids.items()
            if pids
        }


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes, from /proc (0 where /proc is missing)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def memory_kb(pid: int, field: str) -> int:
    """A memory figure of /proc/<pid>/status, in KiB (0 where /proc is missing)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0
