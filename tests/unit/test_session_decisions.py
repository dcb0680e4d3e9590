"""What a session does with its inbox and its run's end (`tether.sessions.decisions`),
case by case, without a server."""

from __future__ import annotations

from tether.schemas.sessions import SessionMessage, SessionState
from tether.sessions.decisions import Incoming, RunEnd, decide

S = "chat"
IDLE = SessionState(agent="researcher", runs=1, last="chat-r1", seen=10)
RUNNING = SessionState(agent="researcher", runs=1, current="chat-r1", seen=10)


def said(seq: int, message_id: str, text: str = "hi", **fields: object) -> Incoming:
    return Incoming(seq, message_id, SessionMessage(text=text, **fields))  # type: ignore[arg-type]


def test_a_first_message_makes_the_session_and_starts_run_one() -> None:
    state, refusals = decide(S, None, [said(1, "m1", agent="researcher")])
    assert refusals == []
    assert state == SessionState(
        agent="researcher", runs=1, current="chat-r1", seen=1, inputs=["m1"]
    )


def test_a_first_message_without_an_agent_or_with_an_unknown_one_is_refused() -> None:
    state, refusals = decide(S, None, [said(1, "m1"), said(2, "m2")])
    assert state is None and [r.message_id for r in refusals] == ["m1", "m2"]
    assert "names the agent" in refusals[0].reason
    state, refusals = decide(S, None, [said(1, "m1", agent="ghost")], refusal="no ghost")
    assert state is None and refusals[0].reason == "no ghost"


def test_messages_during_a_run_steer_it_or_wait_for_the_next_turn_as_each_asks() -> None:
    incoming = [said(11, "a"), said(12, "b", queue=True), said(13, "c")]
    state, _ = decide(S, RUNNING, incoming)
    assert state is not None
    assert (state.steer, state.queued, state.seen) == (["a", "c"], ["b"], 13)


def test_a_message_while_the_runs_task_is_not_made_yet_joins_its_input() -> None:
    starting = SessionState(agent="researcher", runs=1, current="chat-r1", inputs=["m1"])
    state, _ = decide(S, starting, [said(3, "m2")])
    assert state is not None and state.inputs == ["m1", "m2"] and state.steer == []


def test_a_message_to_an_idle_session_starts_the_next_run_continuing_the_last() -> None:
    state, _ = decide(S, IDLE, [said(11, "m")])
    assert state is not None
    assert (state.current, state.runs, state.inputs, state.last) == ("chat-r2", 2, ["m"], "chat-r1")


def test_a_run_that_ends_starts_the_next_with_what_it_did_not_read_then_the_queue() -> None:
    running = SessionState(
        agent="researcher", runs=1, current="chat-r1", steered=["a", "b"], queued=["q"]
    )
    state, _ = decide(S, running, [], ended=RunEnd("chat-r1", completed=True, unread=["b"]))
    assert state is not None
    assert (state.current, state.last, state.inputs) == ("chat-r2", "chat-r1", ["b", "q"])
    assert state.steered == state.queued == state.carried == []


def test_a_failed_run_is_not_continued_and_an_idle_end_stays_idle() -> None:
    state, _ = decide(S, RUNNING, [], ended=RunEnd("chat-r1", completed=False, unread=[]))
    assert state is not None and state.current is None and state.last is None
    other, _ = decide(S, RUNNING, [], ended=RunEnd("chat-r0", completed=True, unread=[]))
    assert other == RUNNING  # not the run under way: changes nothing


def test_edits_withdrawals_repeats_and_the_dispatchers_marks_change_only_the_lists() -> None:
    waiting = SessionState(agent="researcher", runs=1, current="chat-r1", queued=["q1", "q2"])
    incoming = [
        said(20, "q1", text="edited", queue=True),  # an edit of a queued message
        Incoming(21, "q2", SessionMessage(withdrawn=True)),
        Incoming(22, "x", SessionMessage(text="t", taken_by="chat-r1")),
        Incoming(23, "y", SessionMessage(text="t", refused="closed")),
    ]
    state, refusals = decide(S, waiting, incoming)
    assert refusals == [] and state is not None
    assert (state.queued, state.steer, state.seen) == (["q1"], [], 23)


def test_a_closed_session_refuses_later_messages_but_runs_what_came_before() -> None:
    waiting = SessionState(agent="researcher", runs=1, current="chat-r1", queued=["q"])
    state, refusals = decide(
        S, waiting, [Incoming(5, "c", SessionMessage(close=True)), said(6, "late")]
    )
    assert state is not None and state.closed and state.queued == ["q"]
    assert [(r.message_id, r.reason) for r in refusals] == [("late", "session 'chat' is closed")]
    after, _ = decide(S, state, [], ended=RunEnd("chat-r1", completed=True, unread=[]))
    assert after is not None and after.current == "chat-r2" and after.inputs == ["q"]


def test_a_message_naming_another_agent_is_refused() -> None:
    _, refusals = decide(S, IDLE, [said(11, "m", agent="other")])
    assert "bound to agent 'researcher', not 'other'" in refusals[0].reason


def test_an_answer_goes_to_the_run_under_way_and_its_end_waits_for_it() -> None:
    state, refusals = decide(S, RUNNING, [Incoming(11, "yes", SessionMessage(input={"a": 1}))])
    assert refusals == [] and state is not None and state.answers == ["yes"]
    later, _ = decide(S, state, [], ended=RunEnd("chat-r1", completed=True, unread=[]))
    assert later == state  # the answer is given (or refused) before the run's end is taken
    _, refused = decide(S, IDLE, [Incoming(11, "no", SessionMessage(input=True))])
    assert [r.reason for r in refused] == [
        "session 'chat' has no run under way: nothing asks for an answer"
    ]


def test_messages_read_with_the_runs_end_go_to_one_next_run_steered_first() -> None:
    """Read only as the run ended (a dispatcher was away): what was to steer it comes
    first in the next run, then what was queued; nothing is lost or split."""
    incoming = [said(11, "a"), said(12, "b", queue=True), said(13, "c")]
    ended = RunEnd("chat-r1", completed=True, unread=[])
    state, _ = decide(S, RUNNING, incoming, ended=ended)
    assert state is not None
    assert (state.current, state.inputs, state.queued) == ("chat-r2", ["a", "c", "b"], [])
