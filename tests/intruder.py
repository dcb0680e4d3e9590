"""Another local user at an embedded nats-server: what uid 65534 gets from a data dir.

The tests run as root (CI does) and start the intruder with `setpriv`, so it has no
right of the owner's but the ones every local user has.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
SCRIPT = """\
import asyncio, json, os, sys
import nats

port, data_dir = int(sys.argv[1]), sys.argv[2]
seen = {"uid": os.getuid()}

async def connect() -> str:
    errors = []
    async def heard(exc): errors.append(str(exc))
    try:
        nc = await nats.connect(
            f"nats://127.0.0.1:{port}", connect_timeout=2, allow_reconnect=False,
            max_reconnect_attempts=0, error_cb=heard,
        )
    except Exception as exc:
        return f"refused: {'; '.join(errors) or exc!r}"
    await nc.close()
    return "connected"

def attempt(call):
    try:
        return f"read: {call()!r}"
    except OSError as exc:
        return type(exc).__name__

seen["connect"] = asyncio.run(connect())
seen["token"] = attempt(lambda: open(os.path.join(data_dir, "nats-token")).read())
seen["listing"] = attempt(lambda: os.listdir(data_dir))
print(json.dumps(seen))
"""


def needs_root() -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="acting as another local user (uid 65534) needs root and setpriv",
    )


@contextmanager
def open_folder() -> Iterator[Path]:
    """A folder every local user may enter (pytest's tmp_path is under a 0700 one, which
    would keep the intruder out whatever Tether does), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="tether-shared-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def intrude(port: int, data_dir: Path) -> dict[str, object]:
    """As uid 65534: connect to the server with no credentials, read the token file,
    list the data dir. Each says what came of it."""
    done = await _run([*SETPRIV, sys.executable, "-c", SCRIPT, str(port), str(data_dir)], "/")
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout)
    assert seen["uid"] == NOBODY
    return seen


def assert_kept_out(seen: dict[str, object]) -> None:
    assert "authorization violation" in str(seen["connect"]).lower(), seen
    assert seen["token"] == "PermissionError", seen
    assert seen["listing"] == "PermissionError", seen


async def owners_cli(folder: Path, *args: str) -> str:
    """`tether ARGS` run by the owner in `folder` (no TETHER_ variables): its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = str(ROOT)
    done = await _run([sys.executable, "-m", "tether.cli", *args], folder, env)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _run(
    command: list[str], cwd: Path | str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )
