"""Per-run instructions and model settings, and a `tool_choice` reset after the forced
call, through the real `openai` client and the scripted model."""

from __future__ import annotations

from tether import Client, Worker
from tether.testing.llm import ScriptedModel

SEARCH = {"tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}]}


async def test_a_runs_instructions_and_settings_replace_the_agents_for_that_run(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(SEARCH, {"content": "Haiku."})

    handle = await client.submit_agent(
        "researcher", question, instructions="Answer in haiku.", model_settings={"temperature": 0.2}
    )

    assert await handle.wait(timeout=30) == "Haiku."
    calls = model.requests(question)
    assert [(c["system"], c["temperature"]) for c in calls] == [("Answer in haiku.", 0.2)] * 2
    assert calls[1]["messages"] == 4  # one system message: system, question, call, result
    other = model.conversation({"content": "Plain."})
    assert await (await client.submit_agent("researcher", other)).wait(timeout=30) == "Plain."
    assert model.requests(other)[0]["system"] == "You research questions with the tools you have."
    assert model.requests(other)[0]["temperature"] is None


async def test_a_forced_tool_choice_holds_for_the_first_call_only(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(SEARCH, {"content": "Searched once."})

    handle = await client.submit_agent("forced", question)

    assert await handle.wait(timeout=30) == "Searched once."
    assert [c["tool_choice"] for c in model.requests(question)] == ["required", None]
