"""Sessions (`client.session`): a conversation across runs, through the real `openai`
client and the scripted model. A message to an idle session starts a run that continues
the last; a message during a run steers it or waits for the next turn, as its sender
asked; edits land until a run takes the message; a closed session refuses messages; bad
input is refused, said, and loses nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta

import msgspec
import pytest

from tests.conftest import Raw
from tests.sessions import (
    BATCH,
    QUEUED,
    SLOW,
    STEERED,
    heard_once_in_order,
    in_its_tools,
    send_five,
    while_the_tools_run,
)
from tether import Client, Dispatcher, NatsConfig, TaskStatus, Worker
from tether.clock import utcnow
from tether.errors import (
    InvalidTaskError,
    MessageRefusedError,
    MessageTakenError,
    SessionClosedError,
)
from tether.nats.store import Store
from tether.schemas.sessions import SessionState
from tether.sessions import Session, SessionUpdate
from tether.tasks.sweep import Sweeper
from tether.testing import eventually
from tether.testing.llm import ScriptedModel


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
    long_id = "y" * 121  # a subject token, but its runs' task ids would be too long
    subject = store.names.session_in_subject(long_id, "a")
    await raw.js.publish(subject, msgspec.json.encode({"text": "Hi", "agent": "researcher"}))

    async def refused() -> None:
        stored = await store.sessions.latest(long_id, "a")
        assert stored is not None and stored.message.refused is not None
        assert "the limit is 120" in stored.message.refused

    await eventually(refused, timeout=15)

    # A message sent again with its id is the same message, run once.
    first = model.conversation(_answer("Once."))
    chat = _chat(client)
    again = [await chat.send(first, message_id="hello") for _ in range(2)]
    assert again == ["hello", "hello"]
    assert await chat.answer("hello", timeout=30) == "Once."
    state = await chat.state()
    assert state is not None and state.runs == 1 and len(model.requests(first)) == 1


async def test_a_follower_that_leaves_mid_answer_and_comes_back_sees_every_token_once(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    words = [f"w{n} " for n in range(30)]
    first = f"follow {uuid.uuid4().hex[:8]}"
    turns = [_answer("Hello."), _answer("".join(words))]
    model.load({"conversations": [{"match": first, "turns": turns}], "chunk_delay": 0.03})
    chat = _chat(client)
    await chat.answer(await chat.send(first), timeout=30)
    await chat.send("Tell me more.")

    seen: list[SessionUpdate] = []
    async for update in chat.follow():  # the whole conversation, then live
        seen.append(update)
        if update.kind == "text" and update.run == 2:
            break  # gone mid-answer
    async for update in chat.follow(after=seen[-1].position):
        seen.append(update)
        if update.kind == "run_ended" and update.run == 2:
            break

    text = {
        run: "".join(u.text for u in seen if u.kind == "text" and u.run == run) for run in (1, 2)
    }
    assert text == {1: "Hello.", 2: "".join(words)}
    kinds = [(u.kind, u.run) for u in seen if u.kind in ("run_started", "run_ended")]
    assert kinds == [("run_started", 1), ("run_ended", 1), ("run_started", 2), ("run_ended", 2)]
    positions = [u.position for u in seen]
    assert len(positions) == len(set(positions))  # nothing twice
    ended = seen[-1].record
    assert ended is not None and ended.result == "".join(words)
    started = [u.started for u in seen if u.started is not None]
    assert [s.after for s in started] == [None, f"{chat.id}-r1"]


async def test_a_run_that_ends_while_no_dispatcher_runs_is_followed_by_the_next_at_its_start(
    config: NatsConfig, client: Client, agent_worker: Worker, model: ScriptedModel
) -> None:
    async with Dispatcher(config):
        turns = (SLOW, _answer("First."), _answer("Second."))
        chat, _ = await in_its_tools(client, model, *turns)
        queued = await chat.send("Later.", queue=True)

        async def waiting() -> None:
            state = await chat.state()
            assert state is not None and state.queued == [queued]

        await eventually(waiting, timeout=15)
    assert await client.handle(f"{chat.id}-r1").wait(timeout=30) == "First."  # no dispatcher

    async with Dispatcher(config):
        assert await chat.answer(queued, timeout=30) == "Second."


async def test_gc_removes_an_idle_session_with_its_runs_and_keeps_every_run_of_a_live_one(
    client: Client, store: Store, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    old_first, live_first = (f"gc {n} {uuid.uuid4().hex[:8]}" for n in ("old", "live"))
    slow_then = [_answer("A1."), SLOW, _answer("A2."), _answer("A3.")]
    model.load(
        {
            "conversations": [
                {"match": old_first, "turns": [_answer("Old 1."), _answer("Old 2.")]},
                {"match": live_first, "turns": slow_then},
            ]
        }
    )
    old, live = _chat(client), _chat(client)
    one = await old.send(old_first)
    await old.answer(one, timeout=30)
    await old.answer(await old.send("Again."), timeout=30)
    await live.answer(await live.send(live_first), timeout=30)
    more = await live.send("Search.")
    await while_the_tools_run(client.handle(f"{live.id}-r2"))
    await eventually(lambda: _idle(old), timeout=15)

    later = utcnow() + timedelta(seconds=1)  # every finished run is past a zero retention
    report = await Sweeper(store).sweep(timedelta(0), grace=timedelta(days=1), now=later)

    assert report.sessions == [old.id]
    assert {f"{old.id}-r1", f"{old.id}-r2"} <= set(report.tasks)
    assert f"{live.id}-r1" not in report.tasks  # the live session's next run reads it
    assert await old.state() is None and await client.find(f"{old.id}-r1") is None
    assert await old.message(one) is None
    assert await live.answer(more, timeout=30) == "A2."
    assert await live.answer(await live.send("And?"), timeout=30) == "A3."
    assert model.requests(live_first)[-1]["user_texts"] == [live_first, "Search.", "And?"]


async def _idle(chat: Session) -> None:
    state = await chat.state()
    assert state is not None and state.current is None


async def test_an_approval_goes_through_the_inbox_to_the_question_the_run_waits_on(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    email = {"tool_calls": [{"name": "send_email", "arguments": {"to": "ops"}}]}
    first = model.conversation(email, _answer("Sent."))
    chat = _chat(client)
    early = await chat.send_input({"approved": True})  # before any run: nothing is asked
    with pytest.raises(MessageRefusedError, match="no run under way: nothing asks"):
        await chat.taken(early, timeout=15)
    asked = await chat.send(first)
    run = client.handle(await chat.taken(asked, timeout=15))
    await run.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=15)

    wrong = await chat.send_input({"approved": "yes, please"})
    with pytest.raises(MessageRefusedError, match="does not match its input request"):
        await chat.taken(wrong, timeout=15)
    approved = await chat.send_input({"approved": True}, message_id="approve-1")

    assert await chat.taken(approved, timeout=15) == run.task_id
    assert await chat.answer(asked, timeout=30) == "Sent."
    again = await chat.send_input({"approved": True})  # the question was answered
    with pytest.raises(MessageRefusedError, match=r"asks nothing now|nothing asks"):
        await chat.taken(again, timeout=15)
