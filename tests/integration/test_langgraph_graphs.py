"""A compiled LangGraph graph added to an app runs as a Tether tool: its task's id is its
thread's, checkpointed on JetStream; it is submitted like Tether's own agents, its
tools run, its `interrupt()` makes the task wait for a person, a follow-up continues
its thread, its tokens stream live, its nodes show as progress, and its model calls are
counted and bounded by the task's budget (real `langchain-openai` client, scripted
model in its own process)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from tests.conftest import MakeWorker
from tether import App, Client, NatsConfig, TaskFailedError, TaskStatus, Worker
from tether.errors import DefinitionError
from tether.integrations.langgraph import graph_flow as flow
from tether.integrations.langgraph.graph import as_tool
from tether.integrations.langgraph.graph_saver import bucket_of
from tether.integrations.langgraph.saver import JetStreamSaver
from tether.nats.connection import close, connect
from tether.testing import eventually
from tether.testing.llm import ScriptedModel


@pytest.fixture
async def lg_worker(make_worker: MakeWorker, model: ScriptedModel, executions: Path) -> Worker:
    from tests.apps.langgraph_agents import app

    return await make_worker(app)


@pytest.fixture
def gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gates"
    path.mkdir()
    monkeypatch.setenv("TETHER_TEST_GATES", str(path))
    return path


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def _ran(executions: Path) -> Counter[str]:
    return Counter(line.rsplit(" ", 1)[0] for line in executions.read_text().splitlines())


async def test_a_react_graph_answers_with_its_tool_called_and_its_usage_counted(
    client: Client, lg_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    question = model.conversation(
        {"content": "Adding.", **_call("add", a=2, b=3), "usage": _usage(40, 6)},
        {"content": "It is 5.", "usage": _usage(60, 4)},
    )
    handle = await client.submit_agent("lg_react", question)

    assert await handle.wait(timeout=30) == "It is 5."
    sent = model.requests(question)
    assert [r["turn"] for r in sent] == [0, 1]
    assert sent[1]["tool_texts"] == ["5"]
    assert _ran(executions) == {"add 2 3": 1}
    record = await handle.get()
    assert record.usage is not None
    assert (record.usage.requests, record.usage.input_tokens, record.usage.output_tokens) == (
        2,
        100,
        10,
    )
    streamed = "".join([c.delta async for c in handle.stream()])
    assert streamed == "Adding.It is 5."


async def test_a_sync_node_s_model_call_streams_and_is_counted_and_bounded(
    client: Client, lg_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "From a thread.", "usage": _usage(30, 3)})
    handle = await client.submit_agent("lg_sync", question)

    assert await handle.wait(timeout=30) == "From a thread."
    assert "".join([c.delta async for c in handle.stream()]) == "From a thread."
    record = await handle.get()
    assert record.usage is not None and (record.usage.requests, record.usage.total_tokens) == (
        1,
        33,
    )
    refused = await client.submit_agent("lg_sync", question, token_budget=5)
    with pytest.raises(TaskFailedError, match="budget"):
        await refused.wait(timeout=30)
    assert len(model.requests(question)) == 1


async def test_the_thread_is_the_task_and_lives_on_jetstream(
    client: Client, config: NatsConfig, lg_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "Hello."})
    handle = await client.submit_agent("lg_react", question)
    assert await handle.wait(timeout=30) == "Hello."

    nc = await connect(config)
    try:
        saver = JetStreamSaver(nc, bucket=bucket_of(config.names.prefix))
        found = await saver.aget_tuple({"configurable": {"thread_id": handle.task_id}})
    finally:
        await close(nc)
    assert found is not None
    messages = found.checkpoint["channel_values"]["messages"]
    assert [m.text for m in messages] == [question, "Hello."]


async def test_tokens_stream_while_written_and_nodes_show_as_progress(
    client: Client, lg_worker: Worker, model: ScriptedModel, gates: Path
) -> None:
    key = f"k{uuid.uuid4().hex[:6]}"
    words = " ".join(f"w{n}" for n in range(100))
    question = model.conversation(
        {"content": "Looking.", **_call("slow_lookup", key=key)},
        {"content": words},
        chunk_delay=0.01,
    )
    handle = await client.submit_agent("lg_react", question)

    first = await anext(aiter(handle.stream()))
    assert first.delta and (await handle.get()).status is not TaskStatus.COMPLETED

    async def the_tools_node_runs() -> None:
        beat = await client.heartbeat(handle.task_id)
        assert beat is not None and beat.message == "node tools started"

    await eventually(the_tools_node_runs, timeout=30)
    (gates / f"{key}.go").touch()
    assert await handle.wait(timeout=30) == words
    assert "".join([c.delta async for c in handle.stream()]) == "Looking." + words


async def test_an_interrupt_makes_the_task_wait_and_the_answer_resumes_it(
    client: Client, lg_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    question = model.conversation(
        _call("ask_human", question="Which city?"), {"content": "Oslo it is."}
    )
    handle = await client.submit_agent("lg_react", question)

    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    assert waiting.input_request is not None
    assert waiting.input_request.prompt == "Which city?"
    await handle.send_input("Oslo")

    assert await handle.wait(timeout=30) == "Oslo it is."
    assert _ran(executions) == {"ask_human Oslo": 1}
    sent = model.requests(question)
    assert [r["turn"] for r in sent] == [0, 1]  # turn 0 is in the thread: not sent again
    assert sent[1]["tool_texts"] == ["Oslo"]


async def test_a_graph_without_messages_takes_and_answers_its_state(
    client: Client, lg_worker: Worker, executions: Path
) -> None:
    topic = f"t{uuid.uuid4().hex[:6]}"
    handle = await client.submit_agent("lg_outline", {"topic": topic})  # type: ignore[arg-type]

    waiting = await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    request = waiting.input_request
    assert request is not None and f"{topic}: why" in request.prompt
    assert request.schema == {"type": "object", "properties": {"approved": {"type": "boolean"}}}
    await handle.send_input({"approved": True})

    sections = [f"{topic}: why", f"{topic}: how"]
    assert await handle.wait(timeout=30) == {"topic": topic, "sections": sections, "approved": True}
    assert _ran(executions) == {f"draft {topic}": 1, "review {'approved': True}": 1}


async def test_a_follow_up_continues_the_thread_of_the_task_it_follows(
    client: Client, lg_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "First."}, {"content": "Second."})
    first = await client.submit_agent("lg_react", question)
    assert await first.wait(timeout=30) == "First."

    follow = await client.continue_agent(first.task_id, "And then?")
    assert await follow.wait(timeout=30) == "Second."
    asked = model.requests(question)[-1]  # question, "First.", "And then?"
    assert (asked["turn"], asked["messages"]) == (1, 3)

    again = await client.continue_agent(follow.task_id, "Last?")
    with pytest.raises(TaskFailedError, match="no turn 2"):  # the script has two turns
        await again.wait(timeout=30)
    last = model.requests(question)[-1]  # the follow-up of a follow-up: the same thread
    assert (last["turn"], last["messages"]) == (2, 5)


async def test_a_spent_token_budget_stops_the_call_before_it_is_sent(
    client: Client, lg_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "never sent"})
    handle = await client.submit_agent("lg_react", question, token_budget=5)

    with pytest.raises(TaskFailedError, match="budget"):
        await handle.wait(timeout=30)
    assert model.requests(question) == []


async def test_a_request_the_model_refuses_fails_the_task_at_once(
    client: Client, lg_worker: Worker, model: ScriptedModel
) -> None:
    refused = {"content": "never", "faults": [{"status": 400, "message": "bad request"}]}
    question = model.conversation(refused)
    handle = await client.submit_agent("lg_react", question)

    with pytest.raises(TaskFailedError, match="refused the request"):
        await handle.wait(timeout=30)
    assert len(model.requests(question)) == 1  # not retried: a second attempt would pass


def _graph(**compiled: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("echo", lambda state: {"messages": [("ai", "echo")]})
    builder.add_edge(START, "echo")
    return builder.compile(**compiled)


def test_app_add_takes_a_compiled_graph_by_its_name() -> None:
    app = App("graphs")
    graph = _graph(name="echoer")

    assert app.add(graph) is graph
    assert app.tools["echoer"].agent


def test_a_graph_with_another_checkpointer_or_breakpoints_is_refused(config: NatsConfig) -> None:
    with pytest.raises(DefinitionError, match="InMemorySaver"):
        as_tool(_graph(checkpointer=InMemorySaver()))
    with pytest.raises(DefinitionError, match="checkpointer=False"):
        as_tool(_graph(checkpointer=False))
    with pytest.raises(DefinitionError, match="interrupt\\(\\) in a node"):
        as_tool(_graph(interrupt_before=["echo"]))
    assert as_tool(_graph(), name="renamed").name == "renamed"
    saver = JetStreamSaver(config.url, bucket="mine")  # connects only when used
    try:
        assert as_tool(_graph(checkpointer=saver, name="kept")).name == "kept"
    finally:
        saver.close()


ASKED = flow.Wait(id="i1", prompt="Which city?")
AGAIN = flow.Wait(id="i2", prompt="Sure?")


@pytest.mark.parametrize(
    ("thread", "started_at", "answering", "move"),
    [
        (flow.Thread(None), None, None, flow.Start()),  # a new thread
        (flow.Thread("c1"), "c1", None, flow.Start()),  # a follow-up: where it found it
        (flow.Thread("c2", next=("tools",)), "c1", None, flow.GoOn()),  # died mid-run
        (flow.Thread("c2"), "c1", None, flow.Done()),  # died before it reported
        (flow.Thread("c2", ("tools",), (ASKED,)), "c1", None, flow.Ask(ASKED)),
        (flow.Thread("c2", ("tools",), (ASKED,)), "c2", "i1", flow.Answer("i1")),
        (flow.Thread("c2", ("tools",), (AGAIN,)), "c2", "i1", flow.Ask(AGAIN)),  # asks again
        (flow.Thread("c3", ("agent",)), "c2", "i1", flow.GoOn()),  # answered, then died
        (flow.Thread("c4"), "c2", "i1", flow.Done()),
    ],
)
def test_each_attempt_decides_from_where_the_thread_stands(
    thread: flow.Thread, started_at: str | None, answering: str | None, move: flow.Move
) -> None:
    assert flow.first_move(thread, started_at, answering) == move


async def test_an_answer_naming_another_callers_thread_fails_and_leaves_it_waiting(
    client: Client, lg_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    """A resume step's thread is in its input, which any client may write: naming a
    thread of another caller's task fails before anything of it is read or written."""
    question = model.conversation(
        _call("ask_human", question="Which city?"), {"content": "Oslo it is."}
    )
    alice = {"mcp": {"tool": "lg_react", "caller": "alice", "seal": "0" * 64}}
    handle = await client.submit_agent("lg_react", question, metadata=alice)
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=30)
    sent = len(model.requests())

    resume = {"thread": handle.task_id, "interrupt": "any"}
    step = {"tool": "lg_react", "input": {"input": "Bergen", "resume": resume}}
    forged = await client.submit([step])
    with pytest.raises(TaskFailedError) as failed:
        await forged.wait(timeout=30)
    assert failed.value.error.type == "ForeignConversation"
    assert "Oslo" not in failed.value.error.message
    assert len(model.requests()) == sent and "ask_human" not in executions.read_text()

    await handle.send_input("Oslo")  # alice's own answer still resumes it
    assert await handle.wait(timeout=30) == "Oslo it is."
