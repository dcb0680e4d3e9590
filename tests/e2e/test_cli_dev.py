"""`tether demo` and `tether dev` as real processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest
from mcp import Client as McpClient

from tests.conftest import ROOT
from tether import Client, NatsConfig
from tether.nats.server import PID_FILE, NatsServer, NatsServerError
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow

TETHER = [sys.executable, "-m", "tether.cli"]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TETHER_NATS_URL", None)  # these commands embed their own server
    return env


async def test_demo_tells_the_crash_and_the_resume(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *TETHER,
        "demo",
        "--out-dir",
        str(tmp_path / "reports"),
        cwd=tmp_path,
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=90)
    text = output.decode()

    assert process.returncode == 0, text
    assert "killed the worker" in text and "SIGKILL" in text
    assert "search #1 started, attempt 2" in text  # in flight at the crash: runs again
    assert "search #0 (of turn 1) ran once: checkpointed before the crash" in text
    assert "search #1 (of turn 1) ran 2 times: it was running when the worker died" in text
    assert "LLM turn 1 ran once: checkpointed before the crash" in text
    assert "(sent to the model 1 time)" in text  # never sent again
    assert "2 LLM calls: 2 finished (" in text and "cost unknown" in text  # not $0.0000
    assert "turn 2 streams:" in text and "key-value buckets hold the checkpoints" in text
    answer = Path(re.search(r"Answer saved to: (\S+\.md)", text).group(1))  # type: ignore[union-attr]
    assert answer.parent == tmp_path / "reports"
    assert answer.read_text().startswith("# How do durable AI agents survive crashes?")


PLANS = {
    "one search": [{"query": "durable execution checkpoint"}],
    "three alike": [
        {"query": "AI agents in production"},
        {"query": "durable execution checkpoint step"},
        {"query": "NATS JetStream acknowledge redelivered"},
    ],
}


@pytest.mark.parametrize("plan", PLANS)
async def test_demo_crashes_and_resumes_on_any_model(tmp_path: Path, plan: str) -> None:
    """`tether demo --model NAME --base-url URL` against an OpenAI-compatible server that
    is not the demo's own, planning one search or three of equal length (so none
    finishes first): the worker is still killed mid-search and the demo ends well."""
    script = {
        "conversations": [
            {
                "turns": [
                    {"tool_calls": [{"name": "search", "arguments": a} for a in PLANS[plan]]},
                    {"content": "Checkpoints in JetStream. " * 6},
                ]
            }
        ]
    }
    with ScriptedModel(script) as model:
        process = await asyncio.create_subprocess_exec(
            *TETHER,
            "demo",
            "--model",
            "any-model",
            "--base-url",
            model.base_url,
            "--out-dir",
            str(tmp_path / "reports"),
            cwd=tmp_path,
            env={**_env(), "OPENAI_API_KEY": "sk-test"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout=90)
        sent = [request["turn"] for request in model.requests()]
    text = output.decode()

    assert process.returncode == 0, text
    assert "killed the worker" in text and "search #0 started, attempt 2" in text
    assert "LLM turn 1 ran once: checkpointed before the crash" in text
    assert sent == [0, 1]  # no LLM call sent twice


async def test_demo_says_why_a_model_call_is_retried(tmp_path: Path) -> None:
    """`tether demo --base-url` with nothing listening: each retry says it could not
    connect, to which URL (from `--base-url`), and which attempt comes next and when."""
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{free.getsockname()[1]}/v1"
    process = await asyncio.create_subprocess_exec(
        *TETHER,
        *("demo", "--model", "any-model", "--base-url", url),
        *("--out-dir", str(tmp_path / "reports")),
        cwd=tmp_path,
        env={**_env(), "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://elsewhere/v1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        while not any("failed:" in line for line in seen):
            line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
            assert line, "".join(seen)
            seen.append(line.decode())
    finally:
        process.send_signal(signal.SIGINT)  # the demo stops its worker on the way out
        await asyncio.wait_for(process.communicate(), timeout=30)
    retry = seen[-1]
    assert f"LLM turn 1 failed: could not connect to {url}" in retry
    assert "the URL is from tether demo --base-url" in retry
    assert "(attempt 2 of 8, next in " in retry
    assert "worker died" not in "".join(seen)


async def _start_dev(tmp_path: Path, log: Path) -> tuple[asyncio.subprocess.Process, str]:
    out = log.open("ab")
    process = await asyncio.create_subprocess_exec(
        *TETHER,
        "dev",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "state"),
        "--gateway-port",
        "0",
        "--ui-port",
        "0",
        cwd=tmp_path,
        env=_env(),
        stdout=out,
        stderr=out,
    )
    out.close()
    found: list[str] = []

    def ready() -> bool:
        match = re.search(r"NATS\s+(nats://\S+)", log.read_text())
        if match and "Ctrl-C" in log.read_text():
            found.append(match.group(1))
        return bool(found)

    await wait_until(ready, timeout=30, message="tether dev to start")
    return process, found[0]


def _embedded(url: str, tmp_path: Path) -> NatsConfig:
    """How a process elsewhere reaches the server: with the token in its data dir."""
    return NatsConfig(url=url, embedded_dir=str(tmp_path / "state"))


async def _stop(process: asyncio.subprocess.Process) -> int:
    process.send_signal(signal.SIGINT)
    return await asyncio.wait_for(process.wait(), timeout=30)


async def test_dev_serves_tasks_stops_cleanly_and_keeps_them(tmp_path: Path) -> None:
    plan = [{"tool": "search", "input": {"query": "heartbeats"}}, "summarize", "write_report"]
    process, url = await _start_dev(tmp_path, tmp_path / "dev-1.log")
    try:
        async with Client(_embedded(url, tmp_path)) as client:
            result = await (await client.submit(plan, task_id="kept")).wait(timeout=30)
        mcp_url = re.search(r"MCP\s+(http://\S+/mcp)", (tmp_path / "dev-1.log").read_text())
        assert mcp_url, (tmp_path / "dev-1.log").read_text()
        async with McpClient(mcp_url.group(1), mode="legacy") as mcp:
            tools = {tool.name for tool in (await mcp.list_tools()).tools}
        assert {"run_plan", "search", "summarize", "write_report"} <= tools
        ui_url = re.search(r"dashboard\s+(http://\S+/)", (tmp_path / "dev-1.log").read_text())
        assert ui_url, (tmp_path / "dev-1.log").read_text()
        async with httpx.AsyncClient() as http:
            page = await http.get(ui_url.group(1))
        assert page.status_code == 200 and 'href="/tasks/kept"' in page.text
    finally:
        code = await _stop(process)
    assert code == 0, (tmp_path / "dev-1.log").read_text()
    assert Path(result["path"]).exists()

    process, url = await _start_dev(tmp_path, tmp_path / "dev-2.log")
    try:
        async with Client(_embedded(url, tmp_path)) as client:
            record = await client.get("kept")
    finally:
        assert await _stop(process) == 0
    assert record.result == result


async def test_a_killed_dev_takes_its_server_along_and_a_held_store_is_refused(
    tmp_path: Path,
) -> None:
    process, _ = await _start_dev(tmp_path, tmp_path / "dev-killed.log")
    pid_file = tmp_path / "state" / "nats" / PID_FILE
    server_pid = int(pid_file.read_text())

    process.kill()  # SIGKILL: no cleanup code of tether dev runs
    await process.wait()

    await wait_until(lambda: not _alive(server_pid), timeout=15, message="nats-server to exit")

    # A server still holding a store makes the next start refuse it, naming the PID.
    with NatsServer(tmp_path / "held") as holder:
        with pytest.raises(NatsServerError, match=rf"in use by nats-server PID {holder.pid}"):
            NatsServer(tmp_path / "held").start()
        assert holder.running
        dead = holder.pid
    (tmp_path / "held" / PID_FILE).write_text(f"{dead}\n")
    NatsServer(tmp_path / "held").start().stop()  # a stale PID file is no obstacle


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped: its parent died) counts as gone.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())
