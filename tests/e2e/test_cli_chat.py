"""`tether chat`: a terminal chat kept as a session, through the real executable. The
conversation outlives the command (Ctrl-C, then run it again) and a worker's SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.apps.agents import app as agents
from tests.conftest import ROOT
from tests.e2e.test_cli_ops import Run, finish
from tests.sessions import agents_worker
from tether import Client, NatsConfig, Worker
from tether.testing.llm import ScriptedModel


async def _chat(config: NatsConfig, *args: str) -> asyncio.subprocess.Process:
    """`tether chat ARGS`, its input a pipe of the test's."""
    return await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tether.cli", "chat", *args],
        *["--nats", config.url, "--prefix", config.names.prefix],
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"},
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _say(config: NatsConfig, session_id: str, *lines: str) -> Run:
    """Run `tether chat` with these lines as its input, to its end."""
    process = await _chat(config, session_id, "--agent", "researcher")
    assert process.stdin is not None
    process.stdin.write("".join(f"{line}\n" for line in lines).encode())
    process.stdin.close()
    return await finish(process)


async def test_a_chat_goes_on_where_it_was_when_run_again(
    config: NatsConfig, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    first = model.conversation({"content": "JetStream stores."}, {"content": "And replays."})

    one = await _say(config, "cli-chat", first)
    two = await _say(config, "cli-chat", "/queue And then?")

    assert one.code == 0 and two.code == 0, one.err + two.err
    assert one.out == f"you: {first}\nresearcher: JetStream stores.\n"
    assert two.out == one.out + "you: And then?\nresearcher: And replays.\n"  # all of it


async def test_a_chat_left_with_ctrl_c_mid_answer_and_a_worker_killed_loses_nothing(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    answer = " ".join(f"word{n}" for n in range(40))
    first = model.conversation({"content": answer}, chunk_delay=0.05)
    worker = await agents_worker(config, client, tmp_path / "worker.log")
    chat = await _chat(config, "cli-ctrl-c", "--agent", "researcher")
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write(f"{first}\n".encode())
    await chat.stdin.drain()
    seen = await asyncio.wait_for(chat.stdout.readuntil(b"researcher: word0"), 20)

    chat.send_signal(signal.SIGINT)  # Ctrl-C mid-answer
    left = await finish(chat)
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)

    assert left.code == 130, left.err
    assert seen.startswith(f"you: {first}\n".encode())
    async with Worker(agents, config):  # another worker takes the answer on
        again = await _say(config, "cli-ctrl-c")
    assert again.code == 0, again.err
    assert again.out.startswith(f"you: {first}\nresearcher: ")
    assert again.out.endswith(f"{answer}\n")  # the answer whole, whatever was lost
