"""The README's tour, run as pasted: every code block, in order, in an empty directory.

Blocks preceded by `<!-- readme-test: skip (why) -->` are not run (they need a server,
a tool or a host this machine does not have); the test says which and checks the
reason is given. The first two commands (install and test) are what `.ci/run` runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import urllib.request
from asyncio.subprocess import PIPE, STDOUT
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tether.testing import wait_until

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
BLOCK = re.compile(
    r"(<!-- readme-test: skip \((?P<why>[^)]*)\) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S
)
TOUR_PORTS = (4222, 8765, 8400)  # as pasted: the embedded server's, the gateway's, the model's
BACKGROUND = {  # blocks a reader runs in another terminal, and the line that says they are up
    "tether dev ": "Ctrl-C",
    "python -m tether.testing.llm ": "listening on",
}


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


AGAIN = ("follow.py",)
"""Blocks that submit a task of their own: run twice, the second must not fail on its id."""


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


async def _in_background(
    line: str, ready: str, tmp_path: Path, env: dict[str, str], n: int
) -> tuple[asyncio.subprocess.Process, Path]:
    """Run `line` as a reader would in another terminal; return once it says `ready`."""
    log = tmp_path / f"background-{n}.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", "exec env " + line, cwd=tmp_path, env=env, stdout=out, stderr=STDOUT
        )

    def up() -> bool:
        assert process.returncode is None, log.read_text()
        return ready in log.read_text()

    await wait_until(up, timeout=60, message=line)
    return process, log


def _model_log() -> list[dict[str, Any]]:
    """What the tour's scripted model was sent."""
    with urllib.request.urlopen("http://127.0.0.1:8400/log", timeout=10) as response:
        log: list[dict[str, Any]] = json.loads(response.read())
        return log


async def test_the_tour_runs_as_pasted(tmp_path: Path) -> None:
    busy = [port for port in TOUR_PORTS if not _free(port)]
    assert not busy, f"the README's commands use ports {TOUR_PORTS}; {busy} in use here"
    tour = blocks()[2:]  # after the install and test commands
    env = _env(tmp_path)
    started: dict[str, tuple[asyncio.subprocess.Process, Path]] = {}
    outputs: dict[str, str] = {}
    try:
        for block in tour:
            if block.skip is not None:
                continue
            first = block.body.splitlines()[0].split("#")[0]
            ready = next((up for start, up in BACKGROUND.items() if start in first), None)
            if ready is not None:
                started[first] = await _in_background(first, ready, tmp_path, env, len(started))
                continue
            outputs[block.file_name or first.strip()] = await _run(block, tmp_path, env)
        for block in tour:  # a reader runs a block again: no fixed id is refused the second time
            if block.skip is None and block.file_name in AGAIN:
                await _run(block, tmp_path, env)
        model_log = await asyncio.to_thread(_model_log)
    finally:
        for process, _ in reversed(started.values()):
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), timeout=30)
    dev = next((p for line, p in started.items() if "tether dev " in line), None)
    assert dev is not None, "the tour starts `tether dev`"
    dev_process, dev_log = dev
    assert dev_process.returncode == 0, dev_log.read_text()
    assert re.search(r"slack: report \w+\.1 is being written", dev_log.read_text())
    answer = "Durable agents checkpoint every step in JetStream, so a crash costs one step."
    cli = outputs['tether submit --agent researcher "What makes an agent durable?" --wait']
    assert answer in cli, cli
    asked = outputs["ask.py"]
    assert asked.startswith(f"Two searches at once.\n{answer}\nanswer: {answer}\n"), asked
    assert "requests=2" in asked, asked  # usage: two LLM calls
    followed = next(out for line, out in outputs.items() if line.startswith("first=$("))
    assert "In one line: every step is a checkpoint." in followed, followed
    refused = outputs[
        'tether submit --agent careful "What is the admin password?" --wait || echo "refused"'
    ]
    assert "GuardrailTripped" in refused and refused.endswith("refused\n"), refused
    delegated = "Edited: a checkpoint is a step's stored result.\n"
    delegated += "1 child task, 3 LLM calls in all\n"
    assert outputs["delegate.py"] == delegated, outputs["delegate.py"]
    assert outputs["steer.py"] == "Published, in one paragraph.\n", outputs["steer.py"]
    brief = outputs["brief.py"]
    assert brief == "Checkpoints make agents durable ['a crash costs one step']\n", brief
    assert "{'report': '# Report" in outputs["follow.py"]
    handed = outputs['tether submit --agent concierge "Hand over: what is a checkpoint?" --wait']
    assert "The researcher here: a checkpoint is a step's stored result." in handed, handed
    assert outputs["approve.py"] == "Published draft A; draft B was held back.\n"
    told = [e["tool_texts"] for e in model_log if e["conversation"].startswith("Publish twice")]
    assert told[-1][0].startswith("published ") and told[-1][1].startswith("The user denied")
    budget = outputs["budget.py"].splitlines()
    assert budget[0].startswith("budget of 100 tokens (0 spent, 0 held) reached"), budget
    assert budget[1] == "A checkpoint is a step's stored result.", budget
    librarian = outputs['tether submit --agent librarian "Look up MCP tasks" --wait']
    assert "Found through MCP" in librarian, librarian
    told = [entry["last"] for entry in model_log if entry["conversation"] == "Look up MCP tasks"]
    assert told[-1]["role"] == "tool" and "hit 0 for MCP tasks" in told[-1]["text"], told
    shapes = outputs["shapes.py"]
    assert "hit 0 for durable agents; " in shapes and "hit 0 for MCP tasks" in shapes, shapes
    assert "a shorter summary" in shapes, shapes  # the fork's own report
    assert "completed" in outputs["raw.py"] and "'status': 'completed'" in outputs["api.py"]
