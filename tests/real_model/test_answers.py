"""Tether's agents through the real `openai` client against a real llama-server: the
answer streams, usage is counted, a typed answer comes back decoded (llama-server
enforces the schema by grammar), the server's context limit fails the task naming it, and
a model given a tool ends its task whatever it does with it."""

from __future__ import annotations

import pytest

from tests.real_model.agents import PARAGRAPH, City, RealAgents
from tether import Client, TaskFailedError, TaskStatus, Worker
from tether.local_model import SLOT_CONTEXT

FILLER = "The lighthouse keeper wrote the weather in his log every evening. "
"""About 12 tokens: repeated, it fills the context up to what a test leaves free."""


async def test_the_answer_streams_into_the_task_before_it_finishes(
    client: Client, dispatcher: object, worker: Worker, agents: RealAgents
) -> None:
    handle = await client.submit_agent(
        agents.plain,
        PARAGRAPH,
        model_settings={"max_tokens": 300},
    )

    deltas: list[str] = []
    status_at_first = None
    async for chunk in handle.stream():
        if chunk.delta and status_at_first is None:
            status_at_first = (await handle.get()).status
        deltas.append(chunk.delta)
    answer = await handle.wait(timeout=60)

    assert status_at_first is TaskStatus.RUNNING  # the first words came while it ran
    assert len([d for d in deltas if d]) > 1
    assert "".join(deltas) == answer


async def test_usage_counts_the_servers_tokens(
    client: Client, dispatcher: object, worker: Worker, agents: RealAgents
) -> None:
    handle = await client.submit_agent(
        agents.plain, "What is the capital of Japan?", model_settings={"max_tokens": 64}
    )
    await handle.wait(timeout=60)

    usage = (await handle.get()).usage
    assert usage is not None
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.requests >= 1


async def test_a_typed_answer_is_a_valid_instance(
    client: Client, dispatcher: object, worker: Worker, agents: RealAgents
) -> None:
    handle = await client.submit_agent(
        agents.typed, "Which city is the Eiffel Tower in?", model_settings={"max_tokens": 160}
    )

    city = await handle.wait(timeout=60)

    assert isinstance(city, City)
    assert 1 <= len(city.name) <= 40 and 1 <= len(city.country) <= 40


async def test_an_answer_stopped_by_the_servers_context_fails_naming_that_limit(
    client: Client, dispatcher: object, worker: Worker, agents: RealAgents
) -> None:
    text = FILLER * ((SLOT_CONTEXT - 120) // 12)  # leaves the answer about 100 tokens
    question = f"{text}\n\nCopy the text above, word for word, from its first line."
    handle = await client.submit_agent(agents.plain, question)  # no max_tokens: the server's

    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=90)

    error = failed.value.error
    assert error is not None and error.type == "ModelOutputTruncated", error
    print(f"\nthe context limit's message: {error.message}")
    assert "finish_reason 'length'" in error.message
    assert "server" in error.message and "context" in error.message


async def test_a_model_with_a_tool_ends_its_task_whether_or_not_it_calls_it(
    client: Client, dispatcher: object, worker: Worker, agents: RealAgents
) -> None:
    handle = await client.submit_agent(
        agents.tooled, "What is the capital of Japan?", model_settings={"max_tokens": 96}
    )

    try:
        answer = await handle.wait(timeout=90)
    except TaskFailedError as exc:  # a tiny model may garble a call: a clear error is fine
        assert exc.error is not None and exc.error.message, exc
        print(f"\nthe tooled agent failed: {exc.error.type}: {exc.error.message}")
    else:
        assert isinstance(answer, str) and answer.strip()
        print(f"\nthe tooled agent answered: {answer!r}")
    record = await handle.get()
    assert record.status.is_terminal
    # SmolLM2's chat template drops tools: the status says the model never saw them.
    assert any("never saw its tools" in said for said in record.notes), record.notes
