"""Running a Markdown page's code blocks as pasted: the README's tour and the docs pages.

A block is run in order, in an empty directory, with the venv on the PATH. Blocks
preceded by `<!-- readme-test: skip (why) -->`, or fenced as ```python no-run (a page
that says why), are not run. A Python block that a later block runs (`python NAME.py`)
or serves (`tether worker NAME:app`) is only written, so it runs once, with what that
line gives it (a model's URL and key). A block
whose first line starts `tether dev`, `tether worker` or the scripted model runs in the
background, as a reader runs it in another terminal. The
tour's ports are fixed (as pasted), so one tour runs at a time on a machine: a file
lock keeps test processes (pytest-xdist workers) from starting two.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import signal
import socket
import sys
import tempfile
import urllib.request
from asyncio.subprocess import PIPE, STDOUT
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tether.testing import wait_until

README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK = re.compile(
    r"(<!-- readme-test: skip \((?P<why>[^)]*)\) -->\n)?"
    r"```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<body>.*?)```",
    re.S,
)
NO_RUN = "no-run"
"""A fence's info word for a block that needs what no test has (a live local model)."""
TOUR_PORTS = (4222, 8765, 8400)  # as pasted: the embedded server's, the gateway's, the model's
BACKGROUND = {  # blocks a reader runs in another terminal, and the line that says they are up
    "tether dev ": "Ctrl-C",
    "tether worker ": "serving",
    "python -m tether.testing.llm ": "listening on",
}
AGAIN = ("follow.py",)
"""Blocks that submit a task of their own: run twice, the second must not fail on its id."""
SETUP_FILES = ("research.py", "turns.json")
"""What a docs page that continues the tour needs from it (the README writes both)."""


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    skip: str | None
    written: bool = False
    """A Python file a later block runs: writing it is all this block does."""

    @property
    def file_name(self) -> str | None:
        """`research.py` for a Python block whose first line is `# research.py`."""
        match = re.match(r"# (\w+\.py)\n", self.body)
        return match.group(1) if match else None

    @property
    def first(self) -> str:
        return self.body.splitlines()[0].split("#")[0]


def blocks(page: Path) -> list[Block]:
    """The page's code blocks, in order; `skip` says why one is not run."""
    found = []
    for m in BLOCK.finditer(page.read_text()):
        why = m["why"]
        if why is None and NO_RUN in m["info"].split():
            why = f"{NO_RUN}: the page says what it needs"
        found.append(Block(m["lang"], m["body"], why))
    return [
        replace(block, written=_run_later(block, found[i + 1 :])) for i, block in enumerate(found)
    ]


def _run_later(block: Block, later: list[Block]) -> bool:
    """Whether a later shell block runs `block`'s file (`python NAME.py`) or serves it
    (`tether worker NAME:app`)."""
    name = block.file_name
    if block.lang != "python" or name is None:
        return False
    module = re.escape(name.removesuffix(".py"))
    runs = re.compile(rf"(^|\s)(python {module}\.py(\s|$)|tether worker {module}:)", re.M)
    return any(b.lang == "bash" and b.skip is None and runs.search(b.body) for b in later)


def tour_setup() -> list[Block]:
    """The README's blocks that build the tour's world: the app, the model's script, the
    scripted model and `tether dev` (everything up to and including `tether dev`)."""
    tour = blocks(README)[2:]
    end = next(i for i, block in enumerate(tour) if "tether dev " in block.first)
    return [block for block in tour[: end + 1] if block.skip is None]


def env_for(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)
    return env


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@dataclass
class Run:
    """A page being run: what each block printed, and the processes it left running."""

    path: Path
    env: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)
    started: dict[str, tuple[asyncio.subprocess.Process, Path]] = field(default_factory=dict)
    sent: list[dict[str, Any]] = field(default_factory=list)
    """What the scripted model was sent, read before it stopped."""

    async def block(self, block: Block) -> None:
        """Run one block as pasted (in the background if a reader would)."""
        if block.skip is not None:
            return
        ready = next((up for start, up in BACKGROUND.items() if start in block.first), None)
        if ready is not None:
            self.started[block.first] = await self._in_background(block.first, ready)
        else:
            self.outputs[block.file_name or block.first.strip()] = await self.run(block)

    async def run(self, block: Block) -> str:
        if block.lang == "python":
            assert block.file_name, f"a Python block must start with '# NAME.py':\n{block.body}"
            (self.path / block.file_name).write_text(block.body)
            if block.file_name == "research.py" or block.written:
                return ""  # the app `tether dev` serves, or a file a later block runs
            command = [sys.executable, block.file_name]
        else:
            assert block.lang == "bash", block.lang
            command = ["bash", "-euo", "pipefail", "-c", block.body]
        process = await asyncio.create_subprocess_exec(
            *command, cwd=self.path, env=self.env, stdout=PIPE, stderr=PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert process.returncode == 0, (
            f"{block.body}\nstdout:\n{out.decode()}\nstderr:\n{err.decode()}"
        )
        return out.decode()

    async def _in_background(
        self, line: str, ready: str
    ) -> tuple[asyncio.subprocess.Process, Path]:
        """Run `line` as a reader would in another terminal; return once it says `ready`."""
        log = self.path / f"background-{len(self.started)}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                "exec env " + line,
                cwd=self.path,
                env=self.env,
                stdout=out,
                stderr=STDOUT,
            )

        def up() -> bool:
            assert process.returncode is None, log.read_text()
            return ready in log.read_text()

        await wait_until(up, timeout=60, message=line)
        return process, log

    def model_log(self) -> list[dict[str, Any]]:
        """What the tour's scripted model was sent."""
        with urllib.request.urlopen("http://127.0.0.1:8400/log", timeout=10) as response:
            log: list[dict[str, Any]] = json.loads(response.read())
            return log

    async def stop(self) -> None:
        for process, _ in reversed(self.started.values()):
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), timeout=30)

    def dev(self) -> tuple[asyncio.subprocess.Process, Path]:
        dev = next((p for line, p in self.started.items() if "tether dev " in line), None)
        assert dev is not None, "the page starts `tether dev`"
        return dev


@asynccontextmanager
async def page_run(tmp_path: Path) -> AsyncIterator[Run]:
    """One page's run: the tour's ports to itself, its background processes stopped at
    the end."""
    lock = Path(tempfile.gettempdir()) / "tether-tour-ports.lock"
    with lock.open("w") as held:
        await asyncio.to_thread(fcntl.flock, held, fcntl.LOCK_EX)
        busy = [port for port in TOUR_PORTS if not _free(port)]
        assert not busy, f"the tour's commands use ports {TOUR_PORTS}; {busy} in use here"
        run = Run(tmp_path, env_for(tmp_path))
        try:
            yield run
        finally:
            await run.stop()
