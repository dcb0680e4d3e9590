"""What the Node.js interop tests share: `node`, with the pinned NATS packages installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
INSTALL_HINT = (
    "the interop tests need Node.js 20+ and npm on PATH: install them from "
    "https://nodejs.org (or 'apt-get install nodejs npm', 'brew install node')"
)


@pytest.fixture(scope="session")
def node() -> str:
    """The `node` executable, with the client's pinned NATS packages installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(f"{'node' if node is None else 'npm'} not found: {INSTALL_HINT}")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    if int(version.stdout.strip().lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"Node.js {version.stdout.strip()} is too old: {INSTALL_HINT}")
    if not (HERE / "node_modules").is_dir():
        command = "ci" if (HERE / "package-lock.json").exists() else "install"
        done = subprocess.run(
            [npm, command, "--no-audit", "--no-fund"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.fail(f"'npm {command}' in {HERE} failed:\n{done.stdout}\n{done.stderr}")
    return node
