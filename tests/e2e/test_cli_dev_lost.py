"""`tether dev` as a real process whose NATS is lost for good: it exits 1, saying why."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import typer

from tests.conftest import ROOT
from tether.cli.processes import supervise
from tether.nats.server import PID_FILE
from tether.service import Service
from tether.testing import wait_until

pytestmark = pytest.mark.slow

TETHER = [sys.executable, "-m", "tether.cli"]
RESTARTS = "exiting so that a fresh process takes over"


async def _start_dev(tmp_path: Path, *args: str) -> asyncio.subprocess.Process:
    """`tether dev ARGS` with free HTTP ports, once its banner is out; its output goes to
    dev.out and dev.err in `tmp_path`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TETHER_NATS_URL", None)
    out, err = tmp_path / "dev.out", tmp_path / "dev.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *TETHER,
            "dev",
            *args,
            "--gateway-port",
            "0",
            "--ui-port",
            "0",
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )

    def ready() -> bool:
        assert process.returncode is None, err.read_text()
        return "Ctrl-C" in out.read_text()

    await wait_until(ready, timeout=30, message="tether dev to start")
    return process


async def _exit_code(process: asyncio.subprocess.Process, within: float) -> tuple[int, float]:
    """The exit code of `process` and the seconds it took (failing after `within`)."""
    began = time.monotonic()
    try:
        code = await asyncio.wait_for(process.wait(), timeout=within)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"tether dev did not exit within {within:.0f}s") from None
    return code, time.monotonic() - began


def _one_line_reason(err: str) -> str:
    """The error line ending stderr, checked to be the only one and no traceback."""
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], err
    return lines[-1]


async def test_dev_exits_1_naming_its_embedded_server_when_that_dies(tmp_path: Path) -> None:
    process = await _start_dev(tmp_path, "--port", "0", "--data-dir", str(tmp_path / "state"))
    store = tmp_path / "state" / "nats"
    server_pid = int((store / PID_FILE).read_text())

    os.kill(server_pid, signal.SIGKILL)
    code, took = await _exit_code(process, within=30)

    err = (tmp_path / "dev.err").read_text()
    assert code == 1, err
    log = store / "nats-server.log"
    gone = f"the embedded nats-server (PID {server_pid}, log {log}) is gone"
    assert _one_line_reason(err) == f"error: {gone}: {RESTARTS}"
    assert "stopping..." in (tmp_path / "dev.out").read_text()
    assert took < 20, f"took {took:.1f}s"


class _Part(Service):
    """A service that notes its stop; `fails` to stop, or is `lost` once started."""

    def __init__(self, stopped: list[str], name: str, lost: bool = False, fails: bool = False):
        self._stopped, self._name, self._loses, self._fails = stopped, name, lost, fails

    async def start(self) -> None:
        if self._loses:
            self.connection_lost(f"{self._name} is gone")

    async def stop(self) -> None:
        self._stopped.append(self._name)
        if self._fails:
            raise RuntimeError(f"{self._name} could not stop")


def test_a_loss_stops_every_service_even_one_that_fails_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stopped: list[str] = []
    services = [_Part(stopped, "a"), _Part(stopped, "b", fails=True), _Part(stopped, "c", True)]

    with pytest.raises(typer.Exit) as exited:
        supervise(services)

    assert exited.value.exit_code == 1
    assert stopped == ["c", "b", "a"]
    assert capsys.readouterr().err == f"error: c is gone: {RESTARTS}\n"
