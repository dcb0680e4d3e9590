"""An agent's text in `tether submit --agent … --wait` and `tether watch`, as a user sees
it: piped, each turn's text whole under the line that started it, and a replay prints
exactly what following it live printed; on a terminal (a pseudo-terminal read through a
terminal emulator), every line of the answer stays on the screen."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import subprocess
import sys
import uuid

import pyte

from tests.apps.agents import app as agents
from tests.conftest import ROOT, MakeWorker
from tests.e2e.test_cli_ops import tether
from tether import NatsConfig
from tether.testing.llm import ScriptedModel

THINKING = "Let me search for that first."
ANSWER = (
    "Durable agents keep every step in JetStream.\n"
    "A crash costs the step in flight, never a finished one, and the answer streams on "
    "to whoever follows the task, from the start or from where they stopped."
)
COLUMNS, ROWS = 100, 60


def _load(model: ScriptedModel) -> str:
    question = f"stream {uuid.uuid4().hex[:8]}"
    search = {
        "content": THINKING,
        "tool_calls": [{"name": "web_search", "arguments": {"query": "durable"}}],
    }
    turns = [search, {"content": ANSWER}]
    # A word per 10 ms: the answer streams for a while, in many chunks.
    model.load({"chunk_delay": 0.01, "conversations": [{"match": question, "turns": turns}]})
    return question


def _undated(out: str) -> str:
    """Without the date a time carries when it is not today's (a run across midnight)."""
    return re.sub(r"^\d{4}-\d{2}-\d{2} ", "", out, flags=re.MULTILINE)


async def test_piped_each_turns_text_is_whole_under_its_line_and_a_replay_prints_the_same(
    config: NatsConfig, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(agents)
    question = _load(model)
    task_id = f"piped-{uuid.uuid4().hex[:6]}"

    live = await tether(
        config, "submit", "--agent", "researcher", question, "--id", task_id, "--wait"
    )
    replay = await tether(config, "watch", task_id)

    assert live.code == 0 and replay.code == 0, live.err + replay.err
    assert live.out.splitlines()[0] == task_id
    shown = _undated(live.out.split("\n", 1)[1])
    assert shown == _undated(replay.out)  # what following it live printed, exactly
    lines = shown.splitlines()
    first = lines.index(THINKING)
    assert "step_started" in lines[first - 1] and " step 0 " in lines[first - 1] + " "
    assert "step_completed" in lines[first + 1]
    answer = ANSWER.splitlines()
    at = lines.index(answer[0])
    assert lines[at : at + len(answer)] == answer  # whole, in order
    assert "step_started" in lines[at - 1] and "step 2" in lines[at - 1]
    assert "step_completed" in lines[at + len(answer)] and "step 2" in lines[at + len(answer)]


async def test_json_lines_carry_each_turns_text_as_one_line_before_its_step_ends(
    config: NatsConfig, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(agents)
    question = _load(model)
    task_id = f"json-{uuid.uuid4().hex[:6]}"

    run = await tether(
        config, "submit", "--agent", "researcher", question, "--id", task_id, "--wait", "--json"
    )

    lines = run.json_lines()[1:]  # after the reply with the task id
    texts = [(n, line) for n, line in enumerate(lines) if line["event"] == "text"]
    assert [(line["step"], line["text"]) for _, line in texts] == [(0, THINKING), (2, ANSWER)]
    for n, line in texts:
        assert not line["cut_off"] and line["task_id"] == task_id
        assert lines[n + 1]["event"] == "step_completed" and lines[n + 1]["step"] == line["step"]


async def test_on_a_terminal_the_answer_stays_on_the_screen(
    config: NatsConfig, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(agents)
    question = _load(model)

    screen = await _on_a_terminal(config, "submit", "--agent", "researcher", question, "--wait")

    shown = " ".join(" ".join(screen).split())
    assert " ".join(THINKING.split()) in shown
    assert " ".join(ANSWER.split()) in shown  # every word stayed, in order
    assert re.search(r"step_completed\s+step 2", shown)


def _where(config: NatsConfig) -> list[str]:
    return ["--nats", config.url, "--prefix", config.names.prefix]


async def _on_a_terminal(config: NatsConfig, *args: str) -> list[str]:
    """Run `tether ARGS` on a pseudo-terminal of COLUMNS x ROWS; the screen it leaves."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    env |= {"COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
    env.pop("NO_COLOR", None)
    leader, follower = pty.openpty()
    process = subprocess.Popen(  # noqa: ASYNC220 (its terminal is read in a thread)
        [sys.executable, "-m", "tether.cli", *args, *_where(config)],
        env=env,
        cwd=ROOT,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    output = bytearray()
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = await loop.run_in_executor(None, os.read, leader, 65536)
        except OSError:  # the process closed the terminal
            break
        if not data:
            break
        output += data
    os.close(leader)
    assert await asyncio.to_thread(process.wait, 30) == 0, output.decode(errors="replace")
    terminal = pyte.Screen(COLUMNS, ROWS)
    pyte.ByteStream(terminal).feed(bytes(output))
    return [line.rstrip() for line in terminal.display]
