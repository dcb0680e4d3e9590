"""Mistakes in a user's own module, answered by `tether worker` and `tether dev` with one
line naming the file and line and what to write instead, not a traceback (no NATS is
needed: the module is loaded first)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

VARARGS = """\
from tether import App

app = App("mine")


@app.tool
async def search(*queries: str) -> list[str]:
    return list(queries)
"""
SYNTAX = """\
from tether import App

app = App("mine"
"""
NO_TOOLS = """\
from tether import App

app = App("mine")
"""
RAISES = """\
from tether import App

app = App("mine")
settings = {}
key = settings["OPENAI_API_KEY"]
"""


@pytest.mark.parametrize(
    ("source", "fragments"),
    [
        (
            VARARGS,
            ["mine_tools.py:6: tool 'search' takes *queries", "def search(queries: list[str])"],
        ),
        (SYNTAX, ["mine_tools.py:3:", "fix the syntax of 'mine_tools'"]),
        (NO_TOOLS, ["mine_tools:app: no tools to serve", "@app.tool()"]),
        (RAISES, ["raised KeyError: 'OPENAI_API_KEY' at", "mine_tools.py:5"]),
    ],
    ids=["tool-with-varargs", "syntax-error", "no-tools", "module-raises"],
)
@pytest.mark.parametrize("command", ["worker", "dev"])
async def test_a_mistake_in_the_users_module_is_one_line_naming_where(
    tmp_path: Path, source: str, fragments: list[str], command: str
) -> None:
    (tmp_path / "mine_tools.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tether.cli", command, "mine_tools:app"],
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)

    lines = err.decode().strip().splitlines()
    assert process.returncode == 2, (out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err.decode()
    for fragment in fragments:
        assert fragment in lines[0]
