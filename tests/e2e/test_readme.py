"""The README's tour, run as pasted: every code block, in order, in an empty directory.

Blocks preceded by `<!-- readme-test: skip (why) -->` are not run (they need a server,
a tool or a host this machine does not have); the test says which and checks the
reason is given. The first two commands (install and test) are what `.ci/run` runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from asyncio.subprocess import PIPE, STDOUT
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tether.testing import wait_until

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
BLOCK = re.compile(
    r"(<!-- readme-test: skip \((?P<why>[^)]*)\) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S
)
TOUR_PORTS = (4222, 8765)  # as pasted: the embedded server's and the gateway's defaults


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    skip: str | None

    @property
    def file_name(self) -> str | None:
        """`research.py` for a Python block whose first line is `# research.py`."""
        match = re.match(r"# (\w+\.py)\n", self.body)
        return match.group(1) if match else None


def blocks() -> list[Block]:
    text = README.read_text()
    return [Block(m["lang"], m["body"], m["why"]) for m in BLOCK.finditer(text)]


def test_the_first_commands_are_the_ones_ci_runs() -> None:
    install, tests, *_ = blocks()
    assert install.body.strip().endswith("tether demo"), install.body
    assert tests.body.strip().endswith("just test"), tests.body
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install" in ci and "-e '.[dev]'" in ci and "\njust test" in ci


def test_every_skipped_block_says_why() -> None:
    for block in blocks():
        if block.skip is not None:
            assert len(block.skip) > 10, block.body


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)
    return env


async def _run(block: Block, tmp_path: Path, env: dict[str, str]) -> str:
    if block.lang == "python":
        assert block.file_name, f"a Python block must start with '# NAME.py':\n{block.body}"
        (tmp_path / block.file_name).write_text(block.body)
        if block.file_name == "research.py":
            return ""  # the app `tether dev` serves; it has nothing to run by itself
        command = [sys.executable, block.file_name]
    else:
        assert block.lang == "bash", block.lang
        command = ["bash", "-euo", "pipefail", "-c", block.body]
    process = await asyncio.create_subprocess_exec(
        *command, cwd=tmp_path, env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, (
        f"{block.body}\nstdout:\n{out.decode()}\nstderr:\n{err.decode()}"
    )
    return out.decode()


async def test_the_tour_runs_as_pasted(tmp_path: Path) -> None:
    busy = [port for port in TOUR_PORTS if not _free(port)]
    assert not busy, f"the README's commands use ports {TOUR_PORTS}; {busy} in use here"
    tour = blocks()[2:]  # after the install and test commands
    env = _env(tmp_path)
    dev_log = tmp_path / "dev.log"
    dev: asyncio.subprocess.Process | None = None
    outputs: dict[str, str] = {}
    try:
        for block in tour:
            if block.skip is not None:
                continue
            if block.body.startswith("tether dev "):
                with dev_log.open("wb") as log:
                    dev = await asyncio.create_subprocess_exec(
                        "bash",
                        "-c",
                        "exec " + block.body.splitlines()[0].split("#")[0],
                        cwd=tmp_path,
                        env=env,
                        stdout=log,
                        stderr=STDOUT,
                    )
                await wait_until(
                    lambda: "Ctrl-C" in dev_log.read_text(), timeout=60, message="tether dev"
                )
                continue
            outputs[block.file_name or block.body.split()[0]] = await _run(block, tmp_path, env)
    finally:
        if dev is not None:
            dev.send_signal(signal.SIGINT)
            await asyncio.wait_for(dev.wait(), timeout=30)
    assert dev is not None, "the tour starts `tether dev`"
    assert dev.returncode == 0, dev_log.read_text()
    assert "slack: report report-1.1 is being written" in dev_log.read_text()
    assert "{'report': '# Report" in outputs["follow.py"]
    shapes = outputs["shapes.py"]
    assert "hit 0 for durable agents; " in shapes and "hit 0 for MCP tasks" in shapes, shapes
    assert "a shorter summary" in shapes, shapes  # the fork's own report
    assert "completed" in outputs["raw.py"] and "'status': 'completed'" in outputs["api.py"]
