"""A LangGraph graph's chat model, written as its author writes it (`ChatOpenAI` with no
`max_tokens` and no `stream_usage`, on a `base_url` that is not OpenAI's), asked by
Tether for what the task's budget needs (issue 49, item 8): the budget's cap reaches
the model as `max_tokens`, and the usage counted is the stream's usage chunk, not an
estimate from the text (real `langchain-openai` client, scripted model)."""

from __future__ import annotations

import os
from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph

from tests.conftest import MakeWorker
from tether import App, Client
from tether.integrations.langgraph.graph import as_tool
from tether.testing.llm import ScriptedModel

BUDGET = 3000


async def plain(state: MessagesState) -> dict[str, Any]:
    model = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
    )
    return {"messages": [await model.ainvoke(state["messages"])]}


def sync_capped(state: MessagesState) -> dict[str, Any]:
    """A plain `def` node (run in a thread) whose model has its own, smaller, cap."""
    model = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
        max_tokens=40,
    )
    return {"messages": [model.invoke(state["messages"])]}


def _graph(name: str, node: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("answer", node)
    builder.add_edge(START, "answer")
    return builder.compile(name=name)


async def _app_worker(make_worker: MakeWorker) -> None:
    app = App("lg_caps")
    app.add(as_tool(_graph("lg_plain", plain)))
    app.add(as_tool(_graph("lg_sync_capped", sync_capped)))
    await make_worker(app)


async def test_the_budget_s_cap_reaches_the_model_as_max_tokens(
    client: Client, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await _app_worker(make_worker)
    question = model.conversation(
        {"content": "Capped.", "usage": {"prompt_tokens": 30, "completion_tokens": 3}}
    )
    handle = await client.submit_agent("lg_plain", question, token_budget=BUDGET)

    assert await handle.wait(timeout=30) == "Capped."
    [sent] = model.requests(question)
    assert sent["max_tokens"] is not None, "the cap did not reach the model"
    assert 0 < sent["max_tokens"] < BUDGET  # what is left once the input is held

    again = model.conversation({"content": "Its own.", "usage": {"prompt_tokens": 9}})
    handle = await client.submit_agent("lg_sync_capped", again, token_budget=BUDGET)
    assert await handle.wait(timeout=30) == "Its own."
    [sent] = model.requests(again)
    assert sent["max_tokens"] == 40, "a model's own smaller cap is kept"


async def test_the_usage_counted_is_the_stream_s_usage_chunk(
    client: Client, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await _app_worker(make_worker)
    reported = {"prompt_tokens": 1234, "completion_tokens": 56}
    question = model.conversation({"content": "Counted as said.", "usage": reported})
    handle = await client.submit_agent("lg_plain", question)

    assert await handle.wait(timeout=30) == "Counted as said."
    [sent] = model.requests(question)
    assert sent["stream"] is True and sent["max_tokens"] is None  # no budget: no cap
    record = await handle.get()
    assert record.usage is not None
    counted = (record.usage.requests, record.usage.input_tokens, record.usage.output_tokens)
    assert counted == (1, 1234, 56), "estimated from the text, not the stream's usage"
