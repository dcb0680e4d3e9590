"""What the tools of the foreign agents' test apps share (tests/apps/openai_agents.py and
pydantic_agents.py): a line per execution in $TETHER_TEST_EXECUTIONS, and a gate in
$TETHER_TEST_GATES that holds a tool until the test opens it (crash tests kill the
worker while it waits), and chores that show in that file whether tools asked together
ran at once. All work from worker subprocesses too."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tether.testing import wait_until


def record(tag: str) -> None:
    """One line, `<tag> <pid>`, per execution (one O_APPEND write: atomic)."""
    path = os.environ.get("TETHER_TEST_EXECUTIONS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{tag} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


async def gate(key: str) -> None:
    """Touch `<key>.started` in the gates folder, then wait for the test to create
    `<key>.go` (without a gates folder: pass at once)."""
    gates = os.environ.get("TETHER_TEST_GATES")
    if gates:
        Path(gates, f"{key}.started").touch()
        go = Path(gates, f"{key}.go")
        await wait_until(go.exists, timeout=120, message=f"the test to create {go}")


def _started(batch: str) -> int:
    path = os.environ.get("TETHER_TEST_EXECUTIONS")
    if not path:
        return 0
    lines = Path(path).read_text().splitlines()
    return sum(1 for line in lines if line.startswith(f"chore {batch} ") and " started " in line)


async def chore(batch: str, name: str, of: int) -> str:
    """A job that takes a while: it waits (at most 3 s) until all `of` chores of its
    `batch` have started, so chores run one after another each wait out their time, and
    chores run at once all start before any ends (`chore <batch> <name> started|ended`)."""
    record(f"chore {batch} {name} started")
    with contextlib.suppress(AssertionError):  # alone: its time is out, it ends
        await wait_until(lambda: _started(batch) >= of, timeout=3, message="the other chores")
    record(f"chore {batch} {name} ended")
    return f"{name} done"


async def slow_chore(batch: str, name: str, of: int) -> str:
    """A chore that also waits at the gate `<batch>-<name>` (see `gate`)."""
    record(f"chore {batch} {name} started")
    await gate(f"{batch}-{name}")
    record(f"chore {batch} {name} ended")
    return f"{name} done"


def get_weather(city: str) -> str:
    """The weather in a city."""
    record(f"get_weather {city}")
    return f"sunny in {city}"


async def slow_lookup(key: str) -> str:
    """Look a key up (slowly: it waits at the gate named by the key)."""
    record(f"slow_lookup {key}")
    await gate(key)
    return f"{key} = 42"
