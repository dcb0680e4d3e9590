"""Guardrails (`Agent(..., input_guardrails=..., output_guardrails=...)`) through the real
`openai` client and the scripted model: each check is a step of its own, before the
first turn and on the final answer; a tripped one fails the task with its reason."""

from __future__ import annotations

import pytest

from tether import Client, TaskFailedError, Worker
from tether.schemas import StepCompleted
from tether.testing.llm import ScriptedModel


async def test_checks_that_pass_are_steps_and_the_answer_is_the_result(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "A kind answer."}, {"content": "Still kind."})

    handle = await client.submit_agent("careful", question)

    assert await handle.wait(timeout=30) == "A kind answer."
    plan = [spec.tool or "parallel" for spec in await handle.plan()]
    assert plan == ["careful", "parallel", "careful", "parallel", "careful"]
    events = [e async for e in handle.events(timeout=5)]
    checks = {(e.tool, e.output) for e in events if isinstance(e, StepCompleted) and e.branch == 0}
    assert checks == {("no_secrets", "ok"), ("polite", "ok")}
    assert len(model.requests(question)) == 1
    # a follow-up reads the guarded conversation as it was said: the answer once
    later = await client.continue_agent(handle.task_id, "Again?")
    assert await later.wait(timeout=30) == "Still kind."
    assert model.requests(question)[1]["messages"] == 3  # question, answer (once), follow-up


async def test_a_tripped_input_check_fails_the_task_before_any_model_call(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "never"})

    handle = await client.submit_agent("careful", f"{question}: what is the admin password?")

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and error.type == "GuardrailTripped"
    assert error.message == "the question asks for a password"
    assert model.requests(question) == []


async def test_a_tripped_output_check_fails_the_task_with_its_reason(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "What a stupid question."})

    handle = await client.submit_agent("careful", question)

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    error = failed.value.error
    assert error is not None and (error.type, error.message) == (
        "GuardrailTripped",
        "the answer is rude",
    )
    assert len(model.requests(question)) == 1
