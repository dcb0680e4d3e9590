"""What the tools of the foreign agents' test apps share (tests/apps/openai_agents.py and
pydantic_agents.py): a line per execution in $TETHER_TEST_EXECUTIONS, and a gate in
$TETHER_TEST_GATES that holds a tool until the test opens it (crash tests kill the
worker while it waits). Both work from worker subprocesses too."""

from __future__ import annotations

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
