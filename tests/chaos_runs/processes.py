"""The child processes of a run (nats-servers, dispatcher, workers): started so that they
die with the run, stopped on the way out (Ctrl-C included), measured from /proc."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PR_SET_PDEATHSIG = 1

INDEX_REPAIR_EVERY = 10.0
"""How often the run's dispatcher repairs the status index (60 s by default)."""


def die_with_parent() -> Callable[[], None]:
    """A `preexec_fn`: the kernel SIGKILLs the child when this process dies, so a run that
    is itself killed leaves no server or worker behind."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def arrange() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arrange


def spawn(
    command: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`command` with its output in `log`, in a session of its own (a Ctrl-C reaches only
    the run, which then stops its children in order)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            list(command),
            env={**os.environ, "PYTHONPATH": _python_path(), **(env or {})},
            cwd=ROOT,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=die_with_parent() if sys.platform == "linux" else None,
        )


def _python_path() -> str:
    """The repository first (for `tests.chaos_runs.tools`), then whatever the run was given
    (a checkout of another revision of `services/`, say)."""
    given = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(ROOT), *([given] if given else [])])


def rss_mb(pid: int) -> float | None:
    """Resident memory of `pid` in MB (VmRSS from /proc), None once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def terminate(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it does not exit within `timeout`."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL, as a crash would, and reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(10)


@dataclass
class Role:
    """One Tether process: `tether worker ...` or `tether dispatcher ...`."""

    label: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Roles:
    """Every Tether process of a run, started against the same NATS and prefix."""

    url: str
    logs: Path
    replicas: int = 1
    concurrency: int = 32
    """Steps each worker runs at once, per tool."""
    env: dict[str, str] = field(default_factory=dict)
    started: list[Role] = field(default_factory=list)

    def _tether(self, label: str, *args: str) -> Role:
        command = [sys.executable, "-m", "tether.cli", *args, "--nats", self.url]
        command += ["--replicas", str(self.replicas)]
        log = self.logs / f"{label}.log"
        role = Role(label, spawn(command, log, self.env), log)
        self.started.append(role)
        return role

    def dispatcher(self, label: str = "dispatcher") -> Role:
        every = str(INDEX_REPAIR_EVERY)
        return self._tether(label, "dispatcher", "--index-repair-every", every)

    def worker(self, app: str, label: str) -> Role:
        return self._tether(label, "worker", app, "--concurrency", str(self.concurrency))

    def exited(self) -> list[Role]:
        """Processes that ended without being told to (a kill of ours is not counted:
        callers drop a role from `started` before killing it)."""
        return [role for role in self.started if not role.alive]

    def kill(self, role: Role) -> None:
        self.started.remove(role)
        kill(role.process)

    def stop(self) -> None:
        """Workers first (they finish or release their steps), the dispatcher last."""
        for role in sorted(self.started, key=lambda r: r.label.startswith("dispatcher")):
            terminate(role.process)


@contextlib.contextmanager
def stopped_on_exit(*stops: Callable[[], None]) -> Iterator[None]:
    """Run every `stop` on the way out, however the run ends (an error, Ctrl-C, SIGTERM)."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        for stop in stops:
            with contextlib.suppress(Exception):
                stop()
        signal.signal(signal.SIGTERM, previous)
