"""A worker that kills itself at one point of the protocol, and the worker that survives it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import APP, start_worker, stop_worker
from tether import NatsConfig, TaskHandle
from tether.testing import wait_until


async def crash(
    config: NatsConfig,
    crash_at: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app: str = APP,
) -> None:
    """Run a worker that SIGKILLs itself at `crash_at` (see tests/apps/crashing_worker.py)
    and return once it has."""
    monkeypatch.setenv("TETHER_CRASH_AT", crash_at)
    doomed_log = tmp_path / "doomed.log"
    doomed = start_worker(
        config, app, log=doomed_log, entry=[sys.executable, "-m", "tests.apps.crashing_worker"]
    )
    await wait_until(
        lambda: doomed.poll() is not None, timeout=20, message="the worker to kill itself"
    )
    assert doomed.returncode == -9, doomed_log.read_text()
    monkeypatch.delenv("TETHER_CRASH_AT")


async def survive(config: NatsConfig, handle: TaskHandle, tmp_path: Path, app: str = APP) -> Any:
    """A fresh worker; the task's result once it has finished the task."""
    survivor = start_worker(config, app, log=tmp_path / "survivor.log")
    try:
        return await handle.wait(timeout=30)
    finally:
        stop_worker(survivor)
