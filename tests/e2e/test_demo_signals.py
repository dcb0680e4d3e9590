"""`tether demo` stopped mid-run, by SIGTERM or Ctrl-C's SIGINT: every process it
started (nats-server, the scripted model, its workers) stops with it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tether.testing import wait_until

pytestmark = pytest.mark.slow


def _descendants(pid: int) -> set[int]:
    """Every living process below `pid` (read from /proc: children of children too)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stopped_demo_leaves_no_process_running(tmp_path: Path, stop: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TETHER_NATS_URL", None)
    demo = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tether.cli", "demo", "--out-dir", str(tmp_path / "out")],
        "--pace",
        "5",  # slow searches: the story is mid-run when it is stopped
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert demo.stdout is not None
    seen = b""
    started: set[int] = set()
    try:
        while b"Asked agent" not in seen:  # its server, model and worker all run by then
            line = await asyncio.wait_for(demo.stdout.readline(), 60)
            assert line, f"the demo ended before its story began: {seen.decode()}"
            seen += line
        started = _descendants(demo.pid)
        assert len(started) >= 3, started  # nats-server, the model, a worker

        demo.send_signal(stop)
        output, _ = await asyncio.wait_for(demo.communicate(), 30)

        await wait_until(
            lambda: not any(_alive(pid) for pid in started),
            timeout=15,
            message=f"every process the demo started ({sorted(started)}) to stop",
        )
        assert demo.returncode == 128 + stop, (seen + output).decode()
    finally:
        started |= _descendants(demo.pid)
        if demo.returncode is None:
            demo.kill()
            await demo.wait()
        for pid in filter(_alive, started):  # what a failed run left: not for other tests
            os.kill(pid, signal.SIGKILL)
