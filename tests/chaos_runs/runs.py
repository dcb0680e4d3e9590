"""Running a chaos run: its own temp directory, kept when the run fails or is asked to."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import tether
from tests.chaos_runs.processes import ROOT
from tests.chaos_runs.report import say

Main = Callable[[Path], Coroutine[Any, Any, int]]


def run(main: Main, name: str, keep: bool) -> int:
    """`main(directory)`'s exit code; 130 on Ctrl-C (or SIGTERM), after every child
    process has been stopped by `main`'s own clean-up."""
    base = Path(tempfile.mkdtemp(prefix=f"tether-{name}-"))
    code = 1
    try:
        code = asyncio.run(main(base))
    except KeyboardInterrupt:
        say("interrupted: every process stopped")
        code = 130
    finally:
        if code == 0 and not keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            say(f"logs and stores kept in {base}")
    return code


def code_version() -> str:
    """The commit the run ran, and how many files of services/ differed from it."""
    where = Path(tether.__file__).resolve().parents[1]

    def git(*args: str) -> str:
        found = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        )
        return found.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if where != ROOT / "services" or not commit:
        return f"tether from {where} (not this repository's services/)"
    changed = len(git("status", "--porcelain", "--", "services").splitlines())
    return f"{commit} + {changed} changed files under services/"


def code_line(at_start: str) -> str:
    """The code the run ran, saying so when services/ changed while it ran (a worker
    started later then loaded other code than the first ones)."""
    now = code_version()
    return f"code: {now}" if now == at_start else f"code: {at_start} at the start, {now} at the end"
