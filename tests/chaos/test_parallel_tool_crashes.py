"""A worker SIGKILLed while three tool calls of one model response run at once, two of
them finished and journaled, the third still running: a fresh worker runs only the
third again, and sends no model call twice (Pydantic AI and the OpenAI Agents SDK)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.foreign_agents import (
    OPENAI_AGENTS,
    PYDANTIC_AGENTS,
    Crashes,
    chores,
    journaled,
    open_gate,
    ran,
    turns,
)
from tether import Client, NatsConfig, TaskHandle
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sdk_client")]


@pytest.mark.parametrize(
    ("agent", "app"), [("pai_chores", PYDANTIC_AGENTS), ("oai_chores", OPENAI_AGENTS)]
)
async def test_a_worker_killed_during_three_tools_reruns_only_the_unfinished_one(
    agent: str,
    app: str,
    config: NatsConfig,
    client: Client,
    model: ScriptedModel,
    executions: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    crashes = await Crashes(config, app, tmp_path, monkeypatch).register()
    batch, gates = uuid.uuid4().hex[:8], crashes.gates()
    # The long chore is asked first: run one after another, the others never start.
    question = model.conversation(chores(batch, "a", "b", "c", slow="c"), {"content": "Done."})

    async def two_finished_one_running(handle: TaskHandle) -> None:
        async def short_ones_journaled() -> bool:
            return await journaled(config, handle.task_id, "chore") == 2

        await wait_until(
            short_ones_journaled, timeout=30, message="the short chores journaled beside the long"
        )
        assert (gates / f"{batch}-c.started").exists()  # the long one still runs

    handle = await crashes.killed_when(
        lambda: client.submit_agent(agent, question), two_finished_one_running
    )
    open_gate(gates, f"{batch}-c")

    assert await crashes.survive(handle) == "Done."
    assert turns(model, question) == {0: 1, 1: 1}  # no model call sent twice
    assert ran(executions, f"chore {batch} a started") == 1  # finished: not again
    assert ran(executions, f"chore {batch} b started") == 1
    assert ran(executions, f"chore {batch} c started") == 2  # unfinished: again
    assert ran(executions, f"chore {batch} c ended") == 1
    tool_texts = model.requests(question)[-1]["tool_texts"]
    assert sorted(tool_texts) == ["a done", "b done", "c done"]
