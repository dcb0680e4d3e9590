"""Real `tether worker` processes: a global concurrency limit, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from tests.apps.tools import read_executions
from tests.conftest import APP, start_worker, stop_worker
from tether import Client, NatsConfig, TaskStatus
from tether.nats.store import Store
from tether.testing import wait_until


async def test_max_concurrency_holds_across_two_worker_processes(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = tmp_path / "running"
    running.mkdir()
    monkeypatch.setenv("TETHER_TEST_RUNNING", str(running))
    workers = [
        start_worker(config, APP, log=tmp_path / f"w{i}.log", concurrency=8) for i in range(2)
    ]
    try:
        handles = [await client.submit([{"tool": "limited", "input": {}}]) for _ in range(10)]
        await asyncio.gather(*(h.wait(timeout=30) for h in handles))
    finally:
        for worker in workers:
            stop_worker(worker)

    seen = [int(line) for line in (running / "max").read_text().split()]
    assert len(seen) == 10, executions.read_text()
    assert max(seen) == 2  # `limited` has max_concurrency=2: never more, across both processes


async def test_sigterm_finishes_the_running_step_then_exits(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    worker = start_worker(config, APP, log=tmp_path / "worker.log")
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 1.0}}, "fast"])
    await wait_until(lambda: (handle.task_id, 0) in read_executions(executions), timeout=20)

    worker.send_signal(signal.SIGTERM)
    await wait_until(lambda: worker.poll() is not None, timeout=20, message="the worker to exit")

    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()
    record = await handle.get()
    assert record.current_step == 1, "the in-flight step should have finished and handed off"
    replacement = start_worker(config, APP, log=tmp_path / "replacement.log")
    try:
        await handle.wait(timeout=20)
    finally:
        stop_worker(replacement)
    assert read_executions(executions)[(handle.task_id, 0)] == 1


async def test_a_stop_says_what_runs_and_hands_a_long_step_on_within_the_grace(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    """Ctrl-C of a worker in a long step: it says what it stops, exits within its 2 s
    grace (and the last fetch), and the step runs again at once on another worker."""
    log = tmp_path / "worker.log"
    worker = start_worker(config, APP, log=log)
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 30.0}}])
    await wait_until(lambda: (handle.task_id, 0) in read_executions(executions), timeout=20)
    await wait_until(lambda: _holds_a_step(store), timeout=10, message="the step to be held")

    worker.send_signal(signal.SIGINT)
    stopped_at = time.monotonic()
    await wait_until(lambda: worker.poll() is not None, timeout=20, message="the worker to exit")
    took = time.monotonic() - stopped_at

    assert took < 8.0, f"the worker took {took:.1f}s to stop"  # it took 11 s with 10 s of grace
    assert "stopping worker" in log.read_text() and "1 step(s) running" in log.read_text()
    await _runs_again_on_a_new_worker(config, handle.task_id, executions, tmp_path)


async def test_a_stopped_worker_drains_by_default_finishing_its_step_before_it_exits(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    """SIGTERM mid-step (no flag: a drain is the default) takes no new step, lets the
    running one finish past the 2 s grace, then exits: a rolling deploy re-runs nothing."""
    log = tmp_path / "worker.log"
    worker = start_worker(config, APP, log=log, drain=True)
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 4.0}}])
    await wait_until(lambda: (handle.task_id, 0) in read_executions(executions), timeout=20)

    worker.send_signal(signal.SIGTERM)
    await wait_until(lambda: worker.poll() is not None, timeout=30, message="the worker to exit")

    assert worker.returncode == 0, log.read_text()
    assert "draining worker" in log.read_text() and "a second Ctrl-C" in log.read_text()
    assert (await handle.get()).status is TaskStatus.COMPLETED  # before the worker exited
    assert read_executions(executions)[(handle.task_id, 0)] == 1


@pytest.mark.parametrize("how", ["timeout", "second signal"])
async def test_a_drain_cut_short_hands_the_running_step_on(
    how: str,
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drain ends at `--drain-timeout` (saying so) or at a second signal: the step
    still running goes back to its queue and runs again at once on another worker."""
    monkeypatch.setenv("TETHER_DRAIN_TIMEOUT", "1" if how == "timeout" else "60")
    log = tmp_path / "worker.log"
    worker = start_worker(config, APP, log=log, drain=True)
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 30.0}}])
    await wait_until(lambda: (handle.task_id, 0) in read_executions(executions), timeout=20)
    await wait_until(lambda: _holds_a_step(store), timeout=10, message="the step to be held")

    worker.send_signal(signal.SIGTERM)
    if how == "second signal":
        await wait_until(lambda: "draining worker" in log.read_text(), timeout=10)
        worker.send_signal(signal.SIGTERM)
    await wait_until(lambda: worker.poll() is not None, timeout=20, message="the worker to exit")

    assert worker.returncode == 0, log.read_text()
    said = log.read_text()
    if how == "timeout":
        assert "ran out of its 1 s: 1 step(s) still running go back to their queues" in said
    else:
        assert "now: steps still running get 2.0 s" in said, said
    await _runs_again_on_a_new_worker(config, handle.task_id, executions, tmp_path)


async def test_otel_variables_make_a_worker_export_its_step_spans(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "worker-under-test")
    log = tmp_path / "worker.log"
    worker = start_worker(config, APP, log=log)
    try:
        await (await client.submit([{"tool": "fast", "input": 1}])).wait(timeout=20)
    finally:
        stop_worker(worker)  # the exporter flushes at exit

    text = log.read_text()
    assert '"name": "execute_tool fast"' in text, text
    assert '"service.name": "worker-under-test"' in text


async def _runs_again_on_a_new_worker(
    config: NatsConfig, task_id: str, executions: Path, tmp_path: Path
) -> None:
    """The step handed on by a stop runs again at once on a worker started now."""
    replacement = start_worker(config, APP, log=tmp_path / "replacement.log")
    try:
        await wait_until(
            lambda: read_executions(executions)[(task_id, 0)] == 2,
            timeout=10,
            message="the step to run again on the new worker",
        )
    finally:
        stop_worker(replacement)


async def _holds_a_step(store: Store) -> bool:
    """Whether some worker holds a step (its copy is under `<worker>.<msg id>`)."""
    return bool(await store.workers.keys("*.>"))
