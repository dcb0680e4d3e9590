"""The operator commands as a user runs them: the real `tether` executable, a real worker."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from tests.apps.tools import app as tools_app
from tests.conftest import APP, ROOT, Raw, start_worker, stop_worker
from tether import Client, NatsConfig, TaskStatus, Worker
from tether.nats.store import Store
from tether.schemas import Names

CLI_TIMEOUT = 30.0


class Run(NamedTuple):
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines()]


async def spawn(
    config: NatsConfig, *args: str, nats: str | None = None
) -> asyncio.subprocess.Process:
    """`tether ARGS --nats URL --prefix PREFIX` in the background, output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tether.cli", *args],
        *["--nats", nats or config.url, "--prefix", config.names.prefix],
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(process: asyncio.subprocess.Process, timeout: float = CLI_TIMEOUT) -> Run:
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(f"tether did not exit within {timeout}s: {out!r} {err!r}") from None
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


async def tether(config: NatsConfig, *args: str, nats: str | None = None) -> Run:
    return await finish(await spawn(config, *args, nats=nats))


def assert_one_line_error(run: Run, *fragments: str) -> None:
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("error: ") and "Traceback" not in run.err
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the `gated` tool needs (set before the worker starts: it inherits the env)."""
    path = tmp_path / "gate"
    monkeypatch.setenv("TETHER_TEST_GATE", str(path))
    return path


@pytest.fixture
async def worker(
    config: NatsConfig, registered: None, dispatcher: object, gate: Path, tmp_path: Path
) -> AsyncIterator[subprocess.Popen[bytes]]:
    process = start_worker(config, APP, log=tmp_path / "worker.log")
    yield process
    await asyncio.to_thread(stop_worker, process)


async def running(client: Client, task_id: str) -> None:
    await client.handle(task_id).wait_for(lambda r: r.status is TaskStatus.RUNNING, timeout=20)


async def test_submit_wait_runs_a_three_step_task_and_prints_its_result(
    config: NatsConfig, worker: object
) -> None:
    run = await tether(
        config,
        "submit",
        'search={"query": "AI trends 2026"}',
        "summarize",
        "write_report",
        "--wait",
    )

    assert run.code == 0, run
    task_id, *events = run.out.splitlines()
    assert [line.split()[1] for line in events[:2]] == ["submitted", "step_started"]
    assert any("completed" in line and "write_report" not in line for line in events)
    assert "# Report" in run.out and '"sources": 3' in run.out
    assert len(task_id) == 32


async def test_submit_prints_the_id_then_status_and_result_show_the_task(
    config: NatsConfig, client: Client, worker: object
) -> None:
    run = await tether(config, "submit", "fast=1", "--id", "cli-1", "--meta", "user=alice")
    assert (run.code, run.out.strip()) == (0, "cli-1"), run

    result = await tether(config, "result", "cli-1", "--wait", "--timeout", "20", "--json")
    assert (result.code, result.json()) == (0, {"step": 0, "payload": 1}), result
    status = await tether(config, "status", "cli-1", "--json")
    assert status.code == 0, status
    record = status.json()
    assert (record["task_id"], record["status"], record["current_step"]) == (
        "cli-1",
        "completed",
        1,
    )
    assert record["metadata"] == {"user": "alice"} and record["last_event"]["event"] == "completed"
    human = await tether(config, "status", "cli-1")
    assert "completed" in human.out and "1/1 fast" in human.out
    pretty = await tether(config, "result", "cli-1")
    assert pretty.code == 0 and json.loads(pretty.out) == {"step": 0, "payload": 1}

    submitted = await tether(config, "submit", "--json", "fast")
    assert submitted.code == 0 and len(submitted.json()["task_id"]) == 32
    await client.handle(submitted.json()["task_id"]).wait(timeout=20)


async def test_submit_a_task_file(
    config: NatsConfig, client: Client, worker: object, tmp_path: Path
) -> None:
    task = {"task_id": "from-file", "steps": [{"tool": "fast", "input": 2}], "metadata": {"a": "1"}}
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))

    run = await tether(config, "submit", "--file", str(path), "--meta", "b=2", "--deadline", "60")

    assert (run.code, run.out.strip()) == (0, "from-file"), run
    assert await client.handle("from-file").wait(timeout=20) == {"step": 0, "payload": 2}
    record = await client.get("from-file")
    assert record.metadata == {"a": "1", "b": "2"} and record.deadline_at is not None


async def test_watch_a_completed_task_and_a_running_one(
    config: NatsConfig, client: Client, worker: object
) -> None:
    done = await client.submit([{"tool": "fast", "input": 1}, "fast"])
    await done.wait(timeout=20)
    slow = await client.submit([{"tool": "slow", "input": {"sleep": 1.5}}])
    await running(client, slow.task_id)

    live = await spawn(config, "watch", slow.task_id)
    replay = await tether(config, "watch", done.task_id)
    as_json = await tether(config, "watch", done.task_id, "--json")
    following = await finish(live)

    assert replay.code == 0, replay
    assert [line.split()[1] for line in replay.out.splitlines()[:6]] == [
        "submitted",
        "step_started",
        "step_completed",
        "step_started",
        "step_completed",
        "completed",
    ]
    assert as_json.code == 0 and as_json.json_lines()[-1]["event"] == "completed"
    assert as_json.json_lines()[-1]["output"] == {"step": 1, "payload": {"step": 0, "payload": 1}}
    assert following.code == 0, following
    assert "step_started    step 0 slow" in following.out and "completed" in following.out


async def test_a_failing_task_exits_1(config: NatsConfig, worker: object) -> None:
    run = await tether(config, "submit", "refuses", "--wait")

    assert run.code == 1, run
    assert "TerminalError: permission denied" in run.out
    result = await tether(config, "result", run.out.split()[0])
    assert result.code == 1
    assert_one_line_error(result, "failed", "permission denied")


async def test_cancel_a_running_task_then_watch_exits_3(
    config: NatsConfig, client: Client, worker: object
) -> None:
    handle = await client.submit([{"tool": "slow", "input": {"sleep": 30}}, "fast"])
    await running(client, handle.task_id)
    watching = await spawn(config, "watch", handle.task_id)

    cancel = await tether(config, "cancel", handle.task_id)

    assert (cancel.code, cancel.out.strip()) == (0, f"cancelled task {handle.task_id}"), cancel
    watched = await finish(watching)
    assert watched.code == 3, watched
    assert watched.out.splitlines()[-1].split()[1] == "cancelled"
    again = await tether(config, "cancel", handle.task_id)
    assert again.code == 2
    assert_one_line_error(again, "already cancelled")
    assert (await tether(config, "result", handle.task_id)).code == 3


async def test_input_answers_a_waiting_task(
    config: NatsConfig, client: Client, worker: object
) -> None:
    handle = await client.submit(["asks", "fast"])
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=20)
    status = await tether(config, "status", handle.task_id)
    assert "Approve the draft?" in status.out and '"boolean"' in status.out
    wrong = await tether(config, "input", handle.task_id, '{"ok": "yes"}')
    assert wrong.code == 2
    assert_one_line_error(wrong, "'approved' is a required property")

    run = await tether(config, "input", handle.task_id, '{"approved": true}')

    assert run.code == 0, run
    assert await handle.wait(timeout=20) == {"step": 1, "payload": {"approved": True}}
    late = await tether(config, "input", handle.task_id, '{"approved": false}')
    assert late.code == 2
    assert_one_line_error(late, "not waiting for input")


async def test_ls_lists_tasks_and_filters_by_status(
    config: NatsConfig, client: Client, worker: object
) -> None:
    done = await client.submit(["fast"], task_id="ls-done")
    await done.wait(timeout=20)
    slow = await client.submit([{"tool": "slow", "input": {"sleep": 30}}], task_id="ls-slow")
    await running(client, slow.task_id)

    table = await tether(config, "ls")
    completed = await tether(config, "ls", "--status", "completed", "--json")

    assert table.code == 0, table
    rows = {line.split()[0]: line.split()[1:] for line in table.out.splitlines()[1:]}
    assert rows["ls-done"][:3] == ["completed", "1/1", "fast"]
    assert rows["ls-slow"][:3] == ["running", "0/1", "slow"]
    assert completed.code == 0
    assert [t["task_id"] for t in completed.json()["tasks"]] == ["ls-done"]
    unfinished = await tether(config, "result", "ls-slow")
    assert unfinished.code == 2
    assert_one_line_error(unfinished, "is running, not completed", "--wait")
    await slow.cancel()


async def test_gc_removes_finished_tasks_and_never_a_running_one(
    config: NatsConfig, client: Client, store: Store, worker: object
) -> None:
    done = await client.submit(["fast"], task_id="gc-done")
    await done.wait(timeout=20)
    slow = await client.submit([{"tool": "slow", "input": {"sleep": 30}}], task_id="gc-slow")
    await running(client, slow.task_id)

    dry = await tether(config, "gc", "--older-than", "0", "--dry-run", "--json")
    assert dry.code == 0, dry
    assert dry.json()["tasks"] == ["gc-done"] and dry.json()["dry_run"] is True
    assert await store.records.get("gc-done") is not None

    swept = await tether(config, "gc", "--older-than", "0")
    assert swept.code == 0, swept
    assert swept.out.splitlines()[0] == "removed 1 task(s) finished over 0 s ago (1 kept)"
    assert await store.records.get("gc-done") is None
    assert (await slow.get()).status is TaskStatus.RUNNING
    await slow.cancel()


async def test_a_dispatcher_serves_its_metrics_on_the_port_it_prints(config: NatsConfig) -> None:
    process = await spawn(config, "dispatcher", "--metrics-port", "0", "--no-api")
    try:
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stderr.readline(), CLI_TIMEOUT)).decode()
        url = line.strip().removeprefix("metrics at ")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), line
        text = await asyncio.to_thread(_read, url)
        assert "tether_tasks_submitted_total 0.0" in text and "process_cpu_seconds_total" in text
    finally:
        process.terminate()
        await process.wait()


def _read(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_dlq_ls_shows_a_dead_letter_and_dlq_retry_reruns_the_task(
    config: NatsConfig, client: Client, worker: object, gate: Path
) -> None:
    handle = await client.submit([{"tool": "fast", "input": 1}, "gated", "fast"])
    await handle.wait_until_done(timeout=20)

    table = await tether(config, "dlq", "ls")
    letters = await tether(config, "dlq", "ls", "--json")

    assert table.code == 0, table
    assert handle.task_id in table.out and "the gate is closed" in table.out
    (letter,) = letters.json()
    assert (letter["task_id"], letter["tool"], letter["step"]) == (handle.task_id, "gated", 1)
    gate.touch()
    retry = await tether(config, "dlq", "retry", handle.task_id)
    assert retry.code == 0, retry
    assert (await handle.wait(timeout=20))["payload"]["input"] == {"step": 0, "payload": 1}


@pytest.mark.parametrize(
    "command",
    [
        ["status", "ID"],
        ["result", "ID"],
        ["watch", "ID"],
        ["cancel", "ID"],
        ["input", "ID", "{}"],
        ["dlq", "retry", "ID"],
    ],
)
async def test_an_unknown_task_id_exits_4_with_one_line(
    config: NatsConfig, client: Client, command: list[str]
) -> None:
    run = await tether(config, *("no-such-task" if arg == "ID" else arg for arg in command))

    assert run.code == 4, run
    assert_one_line_error(run, "'no-such-task' not found")


async def test_user_mistakes_exit_2_with_one_line(config: NatsConfig, registered: None) -> None:
    bad_json = await tether(config, "submit", "search={query}")
    unknown_tool = await tether(config, "submit", "nonexistent")
    bad_id = await tether(config, "status", "a.b")

    for run, fragment in (
        (bad_json, "not JSON"),
        (unknown_tool, "unknown tool 'nonexistent'"),
        (bad_id, "not a valid id"),
    ):
        assert run.code == 2, run
        assert_one_line_error(run, fragment)


async def test_an_unreachable_nats_exits_2_with_one_line(config: NatsConfig) -> None:
    run = await tether(config, "ls", nats="nats://127.0.0.1:1")

    assert run.code == 2, run
    assert_one_line_error(run, "cannot reach NATS at nats://127.0.0.1:1")


async def test_ui_on_another_address_than_loopback_makes_a_token_and_prints_the_url_with_it(
    config: NatsConfig,
) -> None:
    process = await spawn(config, "ui", "--port", "0", "--host", "0.0.0.0")
    try:
        assert process.stderr is not None
        line = ""
        while "dashboard at " not in line:
            line = (await asyncio.wait_for(process.stderr.readline(), CLI_TIMEOUT)).decode()
            assert line, "tether ui exited before serving"
        url = line.split("dashboard at ", 1)[1].strip()
        assert re.fullmatch(r"http://0\.0\.0\.0:\d+/\?token=[\w-]{20,}", url), url
        base = url.split("?")[0].replace("0.0.0.0", "127.0.0.1")
        async with httpx.AsyncClient(follow_redirects=True) as http:
            assert (await http.get(base)).status_code == 401
            page = await http.get(url.replace("0.0.0.0", "127.0.0.1"))
        assert page.status_code == 200 and "every status" in page.text
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), CLI_TIMEOUT) == 0


async def test_submit_no_strict_keeps_a_task_for_a_tool_not_served_yet_and_status_says_so(
    config: NatsConfig, client: Client, dispatcher: object
) -> None:
    submitted = await tether(config, "submit", "--no-strict", "--id", "early", "not_served_yet")
    assert submitted.code == 0, submitted

    shown = await tether(config, "status", "early")

    assert shown.code == 0, shown
    assert "pending" in shown.out
    assert "waiting for a worker serving 'not_served_yet' since" in shown.out
    await client.cancel("early")


async def test_a_wrong_prefix_says_no_installation_lives_there_and_creates_none(
    config: NatsConfig, client: Client, raw: Raw
) -> None:
    wrong = NatsConfig(url=config.url, names=Names(prefix=config.names.prefix + "x"))

    run = await tether(wrong, "ls")

    assert run.code == 2, run
    assert_one_line_error(run, "no Tether installation under prefix", "tether provision")
    assert wrong.names.submit_stream not in [s.config.name for s in await raw.js.streams_info()]
    provisioned = await tether(wrong, "provision")
    assert provisioned.code == 0, provisioned
    assert f"  KV_{wrong.names.graphs_bucket}" in provisioned.out.splitlines()  # graphs' too
    assert (await tether(wrong, "ls")).code == 0


async def test_builds_lists_the_build_and_ramp_says_what_it_did_or_what_to_do(
    config: NatsConfig, client: Client
) -> None:
    async with Worker(tools_app, config, build="v1"):
        table = await tether(config, "builds")
        listed = await tether(config, "builds", "--json")
        ramp = await tether(config, "builds", "ramp", "v1", "--percent", "5")
        unknown = await tether(config, "builds", "promote", "v9")

    assert table.code == 0 and "v1" in table.out and "current" in table.out, table
    (row,) = listed.json()["builds"]
    assert (row["build"], row["workers"], row["state"]) == ("v1", 1, "current")
    assert ramp.code == 0 and "5% of new tasks go to v1" in ramp.out, ramp
    assert unknown.code != 0
    assert_one_line_error(unknown, "no worker has announced build 'v9'", "--build v9")
