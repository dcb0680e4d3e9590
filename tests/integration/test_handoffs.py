"""Handoffs: an agent hands its conversation over to another (`transfer_to_<agent>`),
which takes it on in the same task, under its own instructions and tools."""

from __future__ import annotations

from tether import Client, Worker
from tether.nats.store import Store
from tether.testing.llm import ScriptedModel


async def test_a_handoff_continues_the_conversation_under_the_other_agent(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation(
        {"tool_calls": [{"name": "transfer_to_billing", "arguments": {}}]},
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "refund"}}]},
        {"content": "Your refund is on its way."},
    )
    handle = await client.submit_agent("triage", question)
    assert await handle.wait(timeout=30) == "Your refund is on its way."

    first, second, third = model.requests(question)
    assert first["system"] == "Hand each question to the right agent."
    assert first["tools"] == ["transfer_to_billing"]
    assert second["system"] == "You handle billing questions."
    assert second["tools"] == ["web_search"]
    assert second["tool_texts"] == ["Transferred to billing."]
    assert third["messages"] == 6  # system, question, handoff, its result, search, results
    ran = [await store.checkpoints.get(handle.task_id, step) for step in range(3)]
    assert [c.spec.tool if c and c.spec else None for c in ran] == ["triage", "billing", None]
    assert (await handle.get()).children == []  # one task: the conversation moved on
