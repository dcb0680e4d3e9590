"""LangGraph graphs, compiled as people compile them (no checkpointer), added to an app.

`lg_react` is a ReAct graph (a model node and LangGraph's `ToolNode`) on the scripted
model at $OPENAI_BASE_URL through `langchain_openai.ChatOpenAI`, read when a call is
made so workers in subprocesses find it too. Its tools append a line per execution to
$TETHER_TEST_EXECUTIONS; `slow_lookup` waits for a go file in $TETHER_TEST_GATES (crash
tests kill the worker while it waits); `ask_human` asks a person with `interrupt()`.
`lg_outline` is a graph without messages: its input and answer are its state.
`lg_fanout` runs two nodes in one super-step, one of them gated like `slow_lookup`.
`lg_sync` calls its model from a plain `def` node (LangGraph runs it in a thread).
"""

from __future__ import annotations

import asyncio
import operator
import os
import weakref
from typing import Annotated, Any, TypedDict

import httpx
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from tests.apps.foreign import gate, record
from tether import App
from tether.integrations.langgraph.graph import as_tool

app = App("langgraph_agents")


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    record(f"add {a} {b}")
    return a + b


@tool
async def slow_lookup(key: str) -> str:
    """Look a key up (slowly)."""
    record(f"slow_lookup {key}")
    await gate(key)
    return f"{key} = 42"


@tool
def ask_human(question: str) -> str:
    """Ask a person, and wait for the answer."""
    answer = interrupt(question)
    record(f"ask_human {answer}")
    return str(answer)


TOOLS = [add, slow_lookup, ask_human]
_models: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def chat_model() -> Any:
    """The scripted model with the tools bound, one per event loop: langchain-openai
    shares an httpx client per base URL across the process, and each test has a loop
    of its own (no keep-alive, so no connection outlives its loop). `stream_usage`:
    on another base_url than OpenAI's, langchain-openai streams no usage without it."""
    loop = asyncio.get_running_loop()
    if loop not in _models:
        model = ChatOpenAI(
            model="gpt-4o-mini",
            base_url=os.environ["OPENAI_BASE_URL"],
            api_key="test",  # type: ignore[arg-type]
            stream_usage=True,
            max_retries=0,
            http_async_client=httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)),
        )
        _models[loop] = model.bind_tools(TOOLS)
    return _models[loop]


async def agent(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await chat_model().ainvoke(state["messages"])]}


react = StateGraph(MessagesState)
react.add_node("agent", agent)
react.add_node("tools", ToolNode(TOOLS))
react.add_edge(START, "agent")
react.add_conditional_edges("agent", tools_condition)
react.add_edge("tools", "agent")
lg_react = react.compile(name="lg_react")


class Outline(TypedDict, total=False):
    topic: str
    sections: list[str]
    approved: bool


def draft(state: Outline) -> Outline:
    record(f"draft {state['topic']}")
    return {"sections": [f"{state['topic']}: why", f"{state['topic']}: how"]}


def review(state: Outline) -> Outline:
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}}
    answer = interrupt({"sections": state["sections"]}, response_schema=schema)
    record(f"review {answer}")
    return {"approved": bool(answer.get("approved")) if isinstance(answer, dict) else False}


outline = StateGraph(Outline)
outline.add_node("draft", draft)
outline.add_node("review", review)
outline.add_edge(START, "draft")
outline.add_edge("draft", "review")
outline.add_edge("review", END)
lg_outline = outline.compile(name="lg_outline")


class Fan(TypedDict, total=False):
    key: str
    done: Annotated[list[str], operator.add]


def quick(state: Fan) -> Fan:
    record(f"quick {state['key']}")
    return {"done": ["quick"]}


async def gated(state: Fan) -> Fan:
    await slow_lookup.ainvoke({"key": state["key"]})
    return {"done": ["gated"]}


def join(state: Fan) -> Fan:
    record(f"join {state['key']}")
    return {}


fanout = StateGraph(Fan)
fanout.add_node("quick", quick)
fanout.add_node("gated", gated)
fanout.add_node("join", join)
fanout.add_edge(START, "quick")
fanout.add_edge(START, "gated")
fanout.add_edge(["quick", "gated"], "join")
fanout.add_edge("join", END)
lg_fanout = fanout.compile(name="lg_fanout")


def answer(state: MessagesState) -> dict[str, Any]:
    model = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key="test",  # type: ignore[arg-type]
        stream_usage=True,
        max_retries=0,
    )
    return {"messages": [model.invoke(state["messages"])]}


synced = StateGraph(MessagesState)
synced.add_node("answer", answer)
synced.add_edge(START, "answer")
lg_sync = synced.compile(name="lg_sync")

app.add(as_tool(lg_react))
app.add(as_tool(lg_outline))
app.add(as_tool(lg_fanout))
app.add(as_tool(lg_sync))
