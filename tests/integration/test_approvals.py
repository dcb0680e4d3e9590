"""Several approvals in one turn: the calls that need none run at once, each gated call is
approved, denied or approved with edited arguments on its own, in any order, and an
answer can reach no other call; an approval nobody answers can count as a denial."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tether import Client, InvalidTaskError, TaskHandle, TaskRecord, TaskStatus, Worker
from tether.testing.llm import ScriptedModel


def _email(to: str) -> dict[str, object]:
    return {"name": "send_email", "arguments": {"to": to}}


async def _asked(handle: TaskHandle, seen: int) -> TaskRecord:
    """The task waiting at a gate after `seen` steps: the calls it asks about."""
    return await handle.wait_for(
        lambda r: r.status is TaskStatus.WAITING and r.current_step > seen, timeout=30
    )


def _pending(record: TaskRecord) -> list[str]:
    assert record.input_request is not None
    return list(record.input_request.schema["properties"]["call_id"]["enum"])


async def test_three_approvals_answered_out_of_order_each_reach_their_own_call(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    calls = [_email(f"a{tag}"), {"name": "web_search", "arguments": {"query": tag}}]
    calls += [_email(f"b{tag}"), _email(f"c{tag}")]
    question = model.conversation({"tool_calls": calls}, {"content": "Done."})
    handle = await client.submit_agent("researcher", question)

    first = await _asked(handle, 0)
    a, b, c = "call_0_0", "call_0_2", "call_0_3"
    assert _pending(first) == [a, b, c]
    assert first.input_request is not None and f"a{tag}" in first.input_request.prompt
    assert executions.read_text().count("web_search") == 1  # ran without waiting for anyone

    await handle.send_input({"call_id": c, "approved": False, "reason": "not c"})
    second = await _asked(handle, first.current_step)
    assert _pending(second) == [a, b]
    with pytest.raises(InvalidTaskError, match="is not one of") as wrong:  # decided already
        await handle.send_input({"call_id": c, "approved": True})
    assert "properties" not in str(wrong.value)  # one useful line, not the whole schema
    assert f"tether status {handle.task_id}" in str(wrong.value)
    await handle.send_input({"call_id": a, "approved": True, "arguments": {"to": f"z{tag}"}})
    third = await _asked(handle, second.current_step)
    assert _pending(third) == [b]
    await handle.send_input({"call_id": b, "approved": True})

    assert await handle.wait(timeout=30) == "Done."
    assert executions.read_text().count("send_email") == 2
    told = model.requests(question)[-1]["tool_texts"]
    assert told == [
        f'(The user changed the arguments to {{"to": "z{tag}"}}.) sent to z{tag}',
        f'["{tag}: result 1","{tag}: result 2"]',
        f"sent to b{tag}",
        "The user denied this tool call: not c",
    ]


async def test_one_answer_without_a_call_id_decides_every_call_asked_about(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    question = model.conversation(
        {"tool_calls": [_email("x@example.com"), _email("y@example.com")]}, {"content": "Done."}
    )
    handle = await client.submit_agent("researcher", question)
    await _asked(handle, 0)
    with pytest.raises(InvalidTaskError, match="call_id"):  # edited arguments: for one call
        await handle.send_input({"approved": True, "arguments": {"to": "z@example.com"}})
    await handle.send_input({"approved": False})
    assert await handle.wait(timeout=30) == "Done."
    assert "send_email" not in executions.read_text()
    assert model.requests(question)[-1]["tool_texts"] == ["The user denied this tool call."] * 2


async def test_edited_arguments_are_checked_field_by_field_and_keep_the_others(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    pay = {"name": "transfer", "arguments": {"to": "ann", "amount": 500}}
    question = model.conversation({"tool_calls": [pay]}, {"content": "Paid."})
    handle = await client.submit_agent("payer", question)
    (call_id,) = _pending(await _asked(handle, 0))

    with pytest.raises(InvalidTaskError) as wrong:
        await handle.send_input(
            {"call_id": call_id, "approved": True, "arguments": {"amount": "5"}}
        )
    assert "$.arguments.amount: '5' is not of type 'integer'" in str(wrong.value)
    await handle.send_input({"call_id": call_id, "approved": True, "arguments": {"amount": 5}})

    assert await handle.wait(timeout=30) == "Paid."
    assert model.requests(question)[-1]["tool_texts"] == [
        '(The user changed the arguments to {"to": "ann", "amount": 5}.) sent 5 to ann'
    ]
    assert executions.read_text().count("transfer") == 1


async def test_an_approval_nobody_answers_can_count_as_a_denial(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel, executions: Path
) -> None:
    question = model.conversation({"tool_calls": [_email("x@example.com")]}, {"content": "Ok."})
    handle = await client.submit_agent("hesitant", question)
    assert await handle.wait(timeout=30) == "Ok."
    assert "send_email" not in executions.read_text()
    told = model.requests(question)[-1]["tool_texts"]
    assert told == ["The user denied this tool call: no answer came in time"]
