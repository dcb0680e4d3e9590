"""The tool calls one model response asks for run at once on Tether, as they do on the
bare framework, for Pydantic AI and the OpenAI Agents SDK: every chore starts before any
of them ends (the chores' own log, tests/apps/foreign.py). Wall times, bare against
Tether, are measured by tests/bench/parallel_tools.py, not here."""

from __future__ import annotations

import importlib
import uuid
from pathlib import Path

import pytest

from tests.foreign_agents import chores, timeline
from tether import Client
from tether.testing.llm import ScriptedModel

AGENTS = {
    "pai_chores": "tests.apps.pydantic_agents",
    "oai_chores": "tests.apps.openai_agents",
}

pytestmark = pytest.mark.usefixtures("sdk_client")


@pytest.mark.parametrize("agent", list(AGENTS))
async def test_the_tools_of_one_response_run_at_once(
    agent: str,
    client: Client,
    make_worker: object,
    model: ScriptedModel,
    executions: Path,
) -> None:
    app = importlib.import_module(AGENTS[agent]).app
    await make_worker(app)  # type: ignore[operator]
    batch = uuid.uuid4().hex[:8]
    question = model.conversation(chores(batch, "a", "b", "c"), {"content": "All done."})
    handle = await client.submit_agent(agent, question)

    assert await handle.wait(timeout=60) == "All done."
    events = timeline(executions, batch)
    assert sorted(events) == sorted(f"{n} {e}" for n in "abc" for e in ("started", "ended"))
    assert all(e.endswith("started") for e in events[:3]), events  # none ended before all began
    sent = model.requests(question)
    assert [r["turn"] for r in sent] == [0, 1]
    assert sorted(sent[1]["tool_texts"]) == ["a done", "b done", "c done"]
