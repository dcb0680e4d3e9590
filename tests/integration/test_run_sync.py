"""`tether.run_sync` from a script of a few lines, run as `python script.py` in a fresh
directory: an embedded nats-server with its data in `.tether/`, a worker in the script's
process, and a run again after a crash (or after success) resuming the same task."""

from __future__ import annotations

import contextlib
import functools
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import tether
from tether import NatsConfig
from tether.errors import DefinitionError
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

AGENT_SCRIPT = """\
import sys, tether
agent = tether.Agent("helper", model="scripted", instructions="Answer briefly.")
print("ANSWER:", tether.run_sync(agent, sys.argv[1]))
"""
NAPPING_SCRIPT = """\
import os, sys, time, tether
def nap(ctx, seconds: float) -> str:
    open(os.environ["NAPS"], "a").write("started\\n"); time.sleep(seconds); return "rested"
agent = tether.Agent("napper", model="scripted", tools=[nap])
print("ANSWER:", tether.run_sync(agent, sys.argv[1]))
"""
PLAN_SCRIPT = """\
import sys, tether
def nap(ctx, seconds: float) -> float:
    import time; open("naps.log", "a").write(f"{seconds}\\n"); time.sleep(seconds); return seconds
print("ANSWER:", tether.run_sync([{"tool": "nap", "input": float(sys.argv[1])}, nap]))
"""
ANSWER = {"content": "Durable steps survive crashes."}


def _script(folder: Path, text: str) -> Path:
    path = folder / "script.py"
    path.write_text(text)
    return path


def _start(folder: Path, *args: str, log: str = "out.log") -> subprocess.Popen[bytes]:
    """`python script.py ARGS` with `folder` as its working directory (output to `log`)."""
    with (folder / log).open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "script.py", *args], cwd=folder, stdout=out, stderr=out
        )


def _run(folder: Path, *args: str, timeout: float = 60) -> str:
    process = _start(folder, *args)
    code = process.wait(timeout)
    output = (folder / "out.log").read_text()
    assert code == 0, output
    return output


def _turns(model: ScriptedModel, question: str) -> Counter[int]:
    """LLM calls sent per turn of the conversation `question` starts."""
    return Counter(r["turn"] for r in model.requests(question))


def test_a_script_of_a_few_lines_runs_an_agent_durably(
    tmp_path: Path, model: ScriptedModel
) -> None:
    question = model.conversation(ANSWER)
    _script(tmp_path, AGENT_SCRIPT)

    output = _run(tmp_path, question)

    assert f"ANSWER: {ANSWER['content']}" in output
    assert (tmp_path / ".tether" / "nats").is_dir()
    assert _turns(model, question) == {0: 1}


def test_a_run_again_returns_the_stored_answer_without_calling_the_model(
    tmp_path: Path, model: ScriptedModel
) -> None:
    question = model.conversation(ANSWER)
    _script(tmp_path, AGENT_SCRIPT)
    _run(tmp_path, question)

    output = _run(tmp_path, question)

    assert f"ANSWER: {ANSWER['content']}" in output
    assert _turns(model, question) == {0: 1}  # the answer came from the task, not the model


async def test_a_script_killed_mid_step_and_run_again_finishes_its_task(
    tmp_path: Path, model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    naps = tmp_path / "naps.log"
    naps.touch()
    monkeypatch.setenv("NAPS", str(naps))
    call = {"name": "nap", "arguments": {"input": 2}}
    question = model.conversation({"tool_calls": [call]}, ANSWER)
    _script(tmp_path, NAPPING_SCRIPT)
    killed = _start(tmp_path, question, log="killed.log")
    try:
        await wait_until(lambda: "started" in naps.read_text(), 60, message="the nap started")
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()

    began = time.monotonic()
    output = _run(tmp_path, question)

    assert f"ANSWER: {ANSWER['content']}" in output
    assert time.monotonic() - began < 30  # the dead worker's step was taken up soon
    assert _turns(model, question) == {0: 1, 1: 1}  # the checkpointed turn was not sent again
    assert naps.read_text().count("started") == 2  # only the step in flight ran again


async def test_two_scripts_at_once_share_one_server(tmp_path: Path) -> None:
    """The second joins the server the first started; the first ends (its server with
    it) while the second still runs, and the second starts the server again and ends."""
    _script(tmp_path, PLAN_SCRIPT)
    naps = tmp_path / "naps.log"
    naps.touch()
    pid_file = tmp_path / ".tether" / "nats" / "tether-nats.pid"
    first = _start(tmp_path, "4", log="first.log")
    await wait_until(pid_file.exists, 30, message="the first script's server started")
    second = _start(tmp_path, "5", log="second.log")
    await wait_until(lambda: "5.0" in naps.read_text(), 60, message="the second script's nap")
    assert first.poll() is None  # both run at once, on one server

    assert first.wait(60) == 0, (tmp_path / "first.log").read_text()
    assert second.poll() is None  # it outlives the server the first one started
    assert second.wait(60) == 0, (tmp_path / "second.log").read_text()

    assert "ANSWER: 4.0" in (tmp_path / "first.log").read_text()
    assert "ANSWER: 5.0" in (tmp_path / "second.log").read_text()


def test_a_plain_function_is_a_tool_and_a_step_list_a_plan(tmp_path: Path) -> None:
    _script(tmp_path, PLAN_SCRIPT)

    assert "ANSWER: 0.0" in _run(tmp_path, "0")


async def test_on_a_terminal_a_run_shows_the_text_as_it_streams(
    tmp_path: Path, model: ScriptedModel
) -> None:
    """A model that rambles is not silent: while it writes, a line on the terminal says
    what it wrote so far (the issue: `run_sync` printed nothing for 3 minutes)."""
    words = "Lighthouses stand on rocky coasts and guide the ships home at night " * 3
    stalled = {"content": words, "faults": [{"stall_after": 8, "seconds": 60}]}
    question = model.conversation(stalled)
    _script(tmp_path, AGENT_SCRIPT)
    leader, follower = pty.openpty()
    script = subprocess.Popen(  # noqa: ASYNC220 (its terminal is read in a thread)
        [sys.executable, "script.py", question],
        cwd=tmp_path,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(follower)
    shown = bytearray()

    def read() -> None:
        with contextlib.suppress(OSError):  # the script closed its terminal
            while data := os.read(leader, 65536):
                shown.extend(data)

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    try:
        # The first pieces are on the screen while the model is still stalled mid-answer.
        await wait_until(lambda: b"guide the" in shown, 30, message=f"the words so far: {shown!r}")
        assert script.poll() is None and b"ANSWER" not in shown
    finally:
        script.kill()
        script.wait()
        reading.join(5)
        os.close(leader)


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    def double(ctx: tether.StepContext, n: int) -> int:
        return 2 * n

    with pytest.raises(RuntimeError, match=r"await tether\.run\(\.\.\.\)"):
        tether.run_sync(double, 21)


async def test_await_run_streams_the_answer_from_a_given_server(
    config: NatsConfig, model: ScriptedModel
) -> None:
    question = model.conversation(ANSWER)
    agent = tether.Agent("streamer", model="scripted")
    tokens: list[str] = []

    answer = await tether.run(
        agent, question, nats_url=config.url, prefix=config.names.prefix, on_token=tokens.append
    )

    assert answer == ANSWER["content"]
    assert "".join(tokens) == ANSWER["content"]


def test_a_tool_nothing_serves_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match="no tool 'triple' here"):
        tether.run_sync([tether.Step(tool="triple", input=1)], data_dir=tmp_path / ".tether")

    assert not (tmp_path / ".tether").exists()


async def test_a_run_again_of_a_failed_task_retries_it_from_the_failed_step(
    config: NatsConfig,
) -> None:
    app = tether.App("flaky")
    ran: list[str] = []
    fixed = False

    @app.tool
    async def fetch(ctx: tether.StepContext, url: str) -> str:
        ran.append(url)
        return f"page of {url}"

    @app.tool
    async def parse(ctx: tether.StepContext, page: str) -> int:
        if not fixed:
            raise tether.TerminalError("the parser has a bug")
        return len(page)

    plan: list[tether.Step | str] = [tether.Step(tool="fetch", input="nats.io"), "parse"]
    where = functools.partial(tether.run, app=app, nats_url=config.url, prefix=config.names.prefix)
    with pytest.raises(tether.TaskFailedError, match="the parser has a bug"):
        await where(plan)
    fixed = True

    assert await where(plan) == len("page of nats.io")
    assert ran == ["nats.io"]  # the completed step was not run again
