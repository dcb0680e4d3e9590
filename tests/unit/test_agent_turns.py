"""The agent loop's pure decisions: what follows a reply or an approval, the conversation
rebuilt from checkpoints, tools as function schemas, errors and streamed text shown."""

from __future__ import annotations

from typing import Any

import msgspec

from tether.agents.conversation import AgentStep, Entry, Turn, rebuild
from tether.agents.models import retry_after
from tether.agents.schemas import function_tool
from tether.agents.turns import CallShape, after_approval, after_reply
from tether.cli.render import StreamedText, format_usage
from tether.schemas.plans import StepSpec
from tether.schemas.records import Usage
from tether.schemas.work import TokenChunk
from tether.schemas.workers import ToolInfo

TOOLS = {"search": CallShape(), "shout": CallShape(wrapped=True), "mail": CallShape(approval=True)}


def _call(n: int, name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _reply(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def test_a_reply_without_tool_calls_is_the_answer() -> None:
    done = after_reply("agent", 1, {"role": "assistant", "content": "42"}, TOOLS)
    assert (done.output, done.steps) == ("42", [])


def test_tool_calls_become_one_group_then_the_next_turn_and_bad_calls_are_answered() -> None:
    reply = _reply(
        _call(0, "search", '{"query": "a"}'),
        _call(1, "shout", '{"input": "hi"}'),
        _call(2, "teleport", "{}"),
        _call(3, "search", "not json"),
    )
    next_ = after_reply("agent", 3, reply, TOOLS)

    group, turn = next_.steps
    assert group.collect_errors and group.parallel == [
        StepSpec(tool="search", input={"query": "a"}),
        StepSpec(tool="shout", input="hi"),  # a string tool gets the unwrapped value
    ]
    assert turn == StepSpec(tool="agent", input={"turn": 4})
    assert next_.output["run"] == ["c0", "c1"]
    assert "no tool named 'teleport'" in next_.output["results"]["c2"]
    assert "not JSON" in next_.output["results"]["c3"]


def test_ungated_calls_run_at_once_and_each_gated_call_is_decided_on_its_own() -> None:
    reply = _reply(
        _call(0, "mail", '{"to": "x"}'),
        _call(1, "search", '{"query": "q"}'),
        _call(2, "mail", '{"to": "y"}'),
        _call(3, "mail", '{"to": "z"}'),
    )
    gated = after_reply("agent", 1, reply, TOOLS)
    group, gate, dispatch, following = gated.steps
    assert group.parallel == [StepSpec(tool="search", input={"query": "q"})]
    assert (gate.input, dispatch.input, following.input) == (
        {"approve": ["c0", "c2", "c3"]},
        {"dispatch": 1},
        {"turn": 2},
    )
    turn = msgspec.convert(gated.output, Turn)
    assert (turn.run, turn.gated) == (["c1"], ["c0", "c2", "c3"])

    # c2 first, then c0: the one still undecided is asked about again
    first = (["c0", "c2", "c3"], {"call_id": "c2", "approved": False, "reason": "no"})
    second = (["c0", "c2", "c3"], {"call_id": "c0", "approved": True, "arguments": {"to": "w"}})
    again = after_approval("agent", 1, turn, [first, second], TOOLS)
    assert again.output == {"undecided": ["c3"]}
    assert [s.input for s in again.steps] == [{"approve": ["c3"]}, {"dispatch": 1}]

    third = (["c3"], {"approved": True})
    done = after_approval("agent", 1, turn, [first, second, third], TOOLS)
    assert done.output["run"] == ["c0", "c3"]
    assert done.output["results"] == {"c2": "The user denied this tool call: no"}
    assert done.output["edited"] == {"c0": '{"to": "w"}'}
    assert done.steps[0].parallel == [
        StepSpec(tool="mail", input={"to": "w"}),  # as the person edited it
        StepSpec(tool="mail", input={"to": "z"}),
    ]


def test_an_answer_for_a_call_its_gate_did_not_ask_about_decides_nothing() -> None:
    reply = _reply(_call(0, "mail", "{}"), _call(1, "mail", "{}"))
    turn = msgspec.convert(after_reply("agent", 1, reply, TOOLS).output, Turn)
    stale = (["c1"], {"call_id": "c0", "approved": False})  # c0 was decided before
    all_of_them = (["c0", "c1"], {"approved": True})
    decided = after_approval("agent", 1, turn, [all_of_them, stale], TOOLS)
    assert decided.output["run"] == ["c0", "c1"]


def test_the_conversation_tells_each_result_after_the_approvals_in_call_order() -> None:
    reply = _reply(_call(0, "mail", '{"to": "x"}'), _call(1, "search", "{}"))
    turned = after_reply("agent", 1, reply, TOOLS)
    group, gate, dispatch, _ = turned.steps
    answer = {"call_id": "c0", "approved": True, "arguments": {"to": "w"}}
    decided = after_approval(
        "agent", 1, msgspec.convert(turned.output, Turn), [(["c0"], answer)], TOOLS
    )
    history = [
        Entry(StepSpec(tool="agent", input={"input": "mail?"}), turned.output),
        Entry(group, ["found"]),
        Entry(gate, answer),
        Entry(dispatch, decided.output),
        Entry(decided.steps[0], ["sent"]),
    ]
    journal = rebuild("", AgentStep(input="mail?"), history)
    assert journal.last_turn is None
    assert journal.messages[-2:] == [
        {
            "role": "tool",
            "tool_call_id": "c0",
            "content": '(The user changed the arguments to {"to": "w"}.) sent',
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ]
    waiting = rebuild("", AgentStep(input="mail?"), history[:3])
    assert waiting.last_turn is not None and waiting.answers == [(["c0"], answer)]


def test_the_conversation_is_rebuilt_from_the_steps_outputs() -> None:
    reply = _reply(_call(0, "search", "{}"), _call(1, "teleport", "{}"))
    first = after_reply("agent", 1, reply, TOOLS)
    usage = Usage(input_tokens=10, output_tokens=2, requests=1)
    history = [
        Entry(StepSpec(tool="agent", input={"input": "why?"}), first.output, usage),
        Entry(first.steps[0], [{"error": {"type": "Boom", "message": "down"}}]),
    ]

    journal = rebuild("Be brief.", AgentStep(input="why?"), history)

    assert [m["role"] for m in journal.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert journal.messages[3] == {
        "role": "tool",
        "tool_call_id": "c0",
        "content": "Error: Boom: down",
    }
    assert journal.messages[4]["content"].startswith("Error: there is no tool named 'teleport'")
    assert (journal.turns, journal.usage, journal.last_turn) == (1, usage, None)


def test_a_struct_tool_is_an_object_schema_and_a_string_tool_is_wrapped() -> None:
    struct = {"$ref": "#/$defs/Q", "$defs": {"Q": {"type": "object", "properties": {}}}}
    spec, wrapped = function_tool(_info("search", struct))
    assert not wrapped and spec["function"]["parameters"] == {"type": "object", "properties": {}}
    spec, wrapped = function_tool(_info("shout", {"type": "string"}))
    assert wrapped and spec["function"]["parameters"]["properties"] == {"input": {"type": "string"}}


def _info(name: str, schema: dict[str, Any]) -> ToolInfo:
    return msgspec.convert(
        {"name": name, "input_schema": schema, "updated_at": "2026-12-01T00:00:00Z"}, ToolInfo
    )


def test_retry_after_reads_seconds_milliseconds_and_nothing() -> None:
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "1500"}) == 1.5
    assert retry_after({}) is None


def test_streamed_text_marks_a_cut_off_attempt_and_drops_its_late_chunks() -> None:
    text = StreamedText()
    chunk = TokenChunk(task_id="t", step=2, attempt=1, seq=0, delta="Hel")
    assert text.add(chunk) == [("Hel", "")]
    retried = msgspec.structs.replace(chunk, attempt=2, delta="Hello")
    note, piece = text.add(retried)
    assert "attempt 1 of step 2 was cut off" in note[0] and piece == ("Hello", "")
    assert text.add(msgspec.structs.replace(chunk, seq=1, delta="lo")) == []


def test_usage_reads_as_tokens_and_calls() -> None:
    usage = Usage(input_tokens=1234, output_tokens=56, cached_tokens=200, requests=3, cost_usd=0.0)
    assert format_usage(usage) == "1,234 in (200 cached) + 56 out = 1,290 tokens, 3 LLM calls"
