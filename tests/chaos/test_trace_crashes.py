"""A task's trace across a worker SIGKILL: the attempt the crash cut short is gone with its
process, and the redelivered attempt is a new span in the same trace, under the client's."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from tests.apps.tools import read_executions
from tests.conftest import APP, start_worker, stop_worker
from tether import Client, NatsConfig, Step
from tether.testing import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def console_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers started from here print their spans (the SDK's console exporter)."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())  # the client's span needs a real context


def _spans(log: Path) -> list[dict[str, Any]]:
    """The spans a console exporter printed (indented JSON objects, one after another)."""
    text, decoder, spans, at = log.read_text(), json.JSONDecoder(), [], 0
    while (at := text.find("{\n", at)) != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 1
            continue
        if isinstance(value, dict) and "context" in value:
            spans.append(value)
        at = end
    return spans


async def test_the_redelivered_attempt_is_a_new_span_in_the_tasks_trace(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    registered: None,
    executions: Path,
    tmp_path: Path,
) -> None:
    doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
    with trace.get_tracer("test").start_as_current_span("client") as client_span:
        handle = await client.submit([Step(tool="slow", input={"sleep": 2})])
    ids = client_span.get_span_context()
    await wait_until(
        lambda: (handle.task_id, 0) in read_executions(executions),
        timeout=20,
        message="the slow step to start",
    )
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)

    survivor_log = tmp_path / "survivor.log"
    survivor = start_worker(config, APP, log=survivor_log)
    try:
        await handle.wait(timeout=30)
    finally:
        stop_worker(survivor)  # the exporter flushes at exit

    steps = [s for s in _spans(survivor_log) if s["name"] == "execute_tool slow"]
    (span,) = [s for s in steps if s["attributes"]["tether.task_id"] == handle.task_id]
    assert span["context"]["trace_id"] == f"0x{ids.trace_id:032x}"  # the task's one trace
    assert span["parent_id"] == f"0x{ids.span_id:016x}"  # under the client's span
    assert span["attributes"]["tether.attempt"] == 2  # the crash's attempt was the first
    assert span["attributes"]["tether.outcome"] == "completed"
    assert "execute_tool slow" not in (tmp_path / "doomed.log").read_text()  # never ended
