"""Sessions (`client.session`): a conversation across runs, through the real `openai`
client and the scripted model. A message to an idle session starts a run that continues
the last; a message during a run steers it or waits for the next turn, as its sender
asked; edits land until a run takes the message; a closed session refuses messages; bad
input is refused, said, and loses nothing."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from tests.conftest import Raw
from tests.sessions import BATCH, QUEUED, STEERED, heard_once_in_order, in_its_tools, send_five
from tether import Client, Worker
from tether.errors import (
    InvalidTaskError,
    MessageRefusedError,
    MessageTakenError,
    SessionClosedError,
)
from tether.nats.store import Store
from tether.schemas.sessions import SessionState
from tether.sessions import Session
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

SLOW = {"tool_calls": [{"name": "slow_search", "arguments": {"query": "durable"}}]}


def _answer(text: str) -> dict[str, str]:
    return {"content": text}


def _chat(client: Client, agent: str = "researcher") -> Session:
    return client.session(f"chat-{uuid.uuid4().hex[:8]}", agent=agent)


async def test_a_message_to_an_idle_session_starts_a_run_that_continues_the_last(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    first = f"session {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": first, "turns": [_answer("One."), _answer("Two.")]}]})
    chat = _chat(client)

    one = await chat.send(first)
    assert await chat.answer(one, timeout=30) == "One."
    two = await chat.send("And then?")
    assert await chat.answer(two, timeout=30) == "Two."

    calls = model.requests(first)
    assert [c["turn"] for c in calls] == [0, 1]
    assert calls[1]["user_texts"] == [first, "And then?"]  # the first run's by reference

    async def idle() -> None:  # the run's end moves the session on
        state = await chat.state()
        assert state is not None and (state.runs, state.current) == (2, None)
        assert state.last == f"{chat.id}-r2"

    await eventually(idle, timeout=15)


async def test_messages_sent_during_a_tool_batch_steer_it_or_wait_as_each_sender_asked(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    chat, first = await in_its_tools(client, model, BATCH, STEERED, QUEUED)

    sent = await send_five(chat)

    await heard_once_in_order(chat, first, sent, model)


async def test_a_queued_message_can_be_edited_or_withdrawn_until_a_run_takes_it(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    chat, first = await in_its_tools(client, model, SLOW, _answer("First."), _answer("Second."))

    steered = await chat.send("Steer now.")
    queued = await chat.send("Draft.", queue=True)
    dropped = await chat.send("Never mind.", queue=True)
    await chat.edit(queued, "Final words.")
    await chat.withdraw(dropped)
    assert await chat.taken(steered, timeout=15) == f"{chat.id}-r1"
    with pytest.raises(MessageTakenError, match=f"run '{chat.id}-r1' took it"):
        await chat.edit(steered, "Too late.")

    assert await chat.answer(queued, timeout=30) == "Second."
    assert model.requests(first)[2]["user_texts"][-1] == "Final words."
    assert "Never mind." not in model.requests(first)[2]["user_texts"]
    with pytest.raises(MessageTakenError, match="took it"):
        await chat.edit(queued, "Later still.")
    with pytest.raises(MessageTakenError, match="withdrawn"):
        await chat.withdraw(dropped)


async def test_a_closed_session_refuses_later_messages_and_says_so(
    client: Client,
    raw: Raw,
    store: Store,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    first = model.conversation(_answer("Bye."))
    chat = _chat(client)
    assert await chat.answer(await chat.send(first), timeout=30) == "Bye."

    await chat.close()
    state = await _eventually_closed(chat)
    assert state.runs == 1
    with pytest.raises(SessionClosedError, match="is closed"):
        await chat.send("Still there?")
    # A sender that does not ask first (any language, raw NATS) is refused by the dispatcher.
    subject = store.names.session_in_subject(chat.id, "late")
    await raw.js.publish(subject, msgspec.json.encode({"text": "Hello?"}))
    with pytest.raises(MessageRefusedError, match="is closed"):
        await chat.taken("late", timeout=15)


async def _eventually_closed(chat: Session) -> SessionState:
    async def closed() -> SessionState:
        state = await chat.state()
        assert state is not None and state.closed
        return state

    return await eventually(closed, timeout=15)


async def test_bad_input_is_refused_with_a_clear_error_and_nothing_is_lost(
    client: Client,
    raw: Raw,
    store: Store,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
) -> None:
    with pytest.raises(InvalidTaskError, match="session id 'a b' is not a valid id"):
        client.session("a b", agent="researcher")
    with pytest.raises(InvalidTaskError, match="the limit is 120"):
        client.session("x" * 121, agent="researcher")
    ghost = _chat(client, agent="ghost")
    with pytest.raises(InvalidTaskError, match="no agent named 'ghost' is registered"):
        await ghost.send("Hello?")
    assert await ghost.state() is None and await ghost.message("m") is None
    tool = _chat(client, agent="web_search")
    with pytest.raises(InvalidTaskError, match="'web_search' is a tool, not an agent"):
        await tool.send("Hello?")
    with pytest.raises(InvalidTaskError, match=r"message id 'a\.b' is not a valid id"):
        await _chat(client).send("Hi", message_id="a.b")
    with pytest.raises(InvalidTaskError, match="name the agent"):
        await client.session("nobody-yet").send("Hi")

    # Raw senders get the same words, on the message itself.
    for agent, said in (("ghost", "no agent named 'ghost'"), (None, "names the agent")):
        unbound = client.session(f"raw-{uuid.uuid4().hex[:8]}")
        subject = store.names.session_in_subject(unbound.id, "a")
        body = {"text": "Hi"} if agent is None else {"text": "Hi", "agent": agent}
        await raw.js.publish(subject, msgspec.json.encode(body))
        with pytest.raises(MessageRefusedError, match=said):
            await unbound.taken("a", timeout=15)
        assert await unbound.state() is None

    # A message sent again with its id is the same message, run once.
    first = model.conversation(_answer("Once."))
    chat = _chat(client)
    again = [await chat.send(first, message_id="hello") for _ in range(2)]
    assert again == ["hello", "hello"]
    assert await chat.answer("hello", timeout=30) == "Once."
    state = await chat.state()
    assert state is not None and state.runs == 1 and len(model.requests(first)) == 1
