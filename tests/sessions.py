"""What the session tests share: a session whose first run is in its tool calls, and the
five messages sent meanwhile, checked as the model heard them."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

from tests.conftest import start_worker
from tether import Client, NatsConfig, TaskHandle
from tether.schemas import StepStarted
from tether.sessions import Session
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

BATCH = {
    "tool_calls": [{"name": "slow_search", "arguments": {"query": f"part {n}"}} for n in range(3)]
}
"""Three tool calls at once (each takes 2 s: `tests.apps.agents.slow_search`)."""
SLOW = {"tool_calls": [{"name": "slow_search", "arguments": {"query": "durable"}}]}
STEERED, QUEUED = {"content": "Steered."}, {"content": "Queued."}


async def while_the_tools_run(handle: TaskHandle) -> None:
    """Returns once the task's tool calls (step 1) have started."""
    async for event in handle.events(timeout=20):
        if isinstance(event, StepStarted) and event.step == 1:
            return


async def in_its_tools(
    client: Client, model: ScriptedModel, *turns: dict[str, Any]
) -> tuple[Session, str]:
    """A new session whose first run (its first message, returned) is in its tool calls,
    the model scripted with `turns`."""
    first = f"session {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": first, "turns": list(turns)}]})
    chat = client.session(f"chat-{uuid.uuid4().hex[:8]}", agent="researcher")
    await chat.send(first)
    await while_the_tools_run(client.handle(f"{chat.id}-r1"))
    return chat, first


async def send_five(chat: Session) -> list[str]:
    """m0, m2, m4 steer the run; m1, m3 wait for the next turn."""
    return [await chat.send(f"m{n}", queue=n % 2 == 1) for n in range(5)]


async def heard_once_in_order(
    chat: Session, first: str, sent: list[str], model: ScriptedModel
) -> None:
    """The run took m0, m2, m4 before its next call; the next run m1, m3; each call once."""
    assert await chat.answer(sent[1], timeout=40) == QUEUED["content"]
    calls = model.requests(first)
    assert [c["turn"] for c in calls] == [0, 1, 2]  # each call once
    assert calls[1]["user_texts"] == [first, "m0", "m2", "m4"]  # steered, in order
    assert calls[2]["user_texts"] == [first, "m0", "m2", "m4", "m1", "m3"]  # the next turn
    taken = [await chat.message(m) for m in sent]
    runs = [message.taken_by if message else None for message in taken]
    assert runs == [f"{chat.id}-r{n}" for n in (1, 2, 1, 2, 1)]


async def agents_worker(config: NatsConfig, client: Client, log: Path) -> subprocess.Popen[bytes]:
    """`tether worker tests.apps.agents:app` as a real process (to SIGKILL), once its
    agent is registered."""
    worker = start_worker(config, "tests.apps.agents:app", log=log)

    async def registered() -> bool:
        return await client.tool("researcher") is not None

    await wait_until(registered, timeout=20, message="the agent registered")
    return worker
