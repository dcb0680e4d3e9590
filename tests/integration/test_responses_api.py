"""Models reached through OpenAI's Responses API (`OpenAIModel(api="responses")`), through
the real `openai` client and the scripted server's `/v1/responses`: the same conversation,
tool calls, streamed text and usage as over Chat Completions."""

from __future__ import annotations

import pytest

from tether import Client, Worker
from tether.testing.llm import ScriptedModel


async def test_an_agent_on_the_responses_api_calls_tools_and_streams_its_answer(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    usage = {"prompt_tokens": 30, "completion_tokens": 7, "cached_tokens": 10}
    question = model.conversation(
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "tides"}}], "usage": usage},
        {"content": "High tide is at noon.", "usage": usage},
    )
    handle = await client.submit_agent("modern", question)
    assert await handle.wait(timeout=30) == "High tide is at noon."

    first, second = model.requests(question)
    assert first["api"] == second["api"] == "responses"
    assert first["system"] == "You research with the Responses API."
    assert first["tools"] == ["web_search"]
    assert first["functions"][0]["parameters"]["required"] == ["query"]
    assert second["messages"] == 4  # instructions, question, the call, its output
    assert second["tool_texts"] == ['["tides: result 1","tides: result 2"]']
    streamed = "".join([chunk.delta async for chunk in handle.stream()])
    assert streamed.endswith("High tide is at noon.")
    record = await handle.get()
    assert record.usage is not None
    assert (record.usage.input_tokens, record.usage.output_tokens) == (60, 14)
    assert (record.usage.cached_tokens, record.usage.requests) == (20, 2)


async def test_a_reply_cut_at_the_output_limit_on_the_responses_api_says_so(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Half an ans", "finish_reason": "length"})
    handle = await client.submit_agent("modern", question)
    with pytest.raises(Exception, match=r"stopped at a token limit.*the server.s own limit"):
        await handle.wait(timeout=30)
