"""The scripted model server, driven through the real `openai` client as an agent loop is.

One server process per module; each test loads its own script and uses its own first
user message, so attempt counters and log entries never mix between tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tether.testing.llm import ScriptedModel

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("search", "fetch")
]


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm") / "requests.jsonl"


@pytest.fixture(scope="module")
def model(log_file: Path) -> Iterator[ScriptedModel]:
    with ScriptedModel(log=log_file) as m:
        yield m


@pytest.fixture
async def client(model: ScriptedModel) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0) as c:
        yield c


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def entries(model: ScriptedModel, conversation: str) -> list[dict[str, Any]]:
    return [e for e in model.requests() if e["conversation"] == conversation]


async def test_streamed_text_arrives_in_chunks_and_ends_with_usage(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 2}
    model.load({"turns": [{"content": text, "usage": usage}]})

    stream = await client.chat.completions.create(
        model="gpt-test",
        messages=user("stream text"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]

    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) == 9
    assert "".join(pieces) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert {c.model for c in chunks} == {"gpt-test"}
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (10, 5)
    assert last.usage.total_tokens == 15
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens == 2


async def test_parallel_tool_calls_stream_and_accumulate(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    calls = [
        {"name": "search", "arguments": {"query": "durable execution on NATS"}},
        {"name": "fetch", "arguments": {"url": "https://example.com/a", "timeout_s": 5}},
    ]
    model.load({"turns": [{"tool_calls": calls}]})

    stream = await client.chat.completions.create(
        model="gpt-test", messages=user("parallel tools"), tools=TOOLS, stream=True
    )
    found: dict[int, dict[str, str]] = {}
    argument_pieces: dict[int, int] = {}
    finish = None
    async for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            call = found.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function is not None:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
                if delta.function.arguments:
                    argument_pieces[delta.index] = argument_pieces.get(delta.index, 0) + 1

    assert finish == "tool_calls"
    assert [found[i]["id"] for i in sorted(found)] == ["call_0_0", "call_0_1"]
    assert [found[i]["name"] for i in sorted(found)] == ["search", "fetch"]
    assert [json.loads(found[i]["arguments"]) for i in sorted(found)] == [
        c["arguments"] for c in calls
    ]
    assert min(argument_pieces.values()) >= 2
    assert entries(model, "parallel tools")[0]["tools"] == ["search", "fetch"]


async def test_a_response_without_streaming_is_one_completion_with_usage(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    model.load({"turns": [{"content": "All done here.", "tool_calls": [{"name": "search"}]}]})

    completion = await client.chat.completions.create(
        model="gpt-whole", messages=user("no streaming")
    )

    assert completion.id == "chatcmpl-0-0"
    assert completion.model == "gpt-whole"
    message = completion.choices[0].message
    assert message.content == "All done here."
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.type == "function"
    assert (call.id, call.function.name, call.function.arguments) == ("call_0_0", "search", "{}")
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 3 + 10  # three words, one call
    assert completion.usage.prompt_tokens > 0


async def test_the_turn_is_the_number_of_assistant_messages(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    model.load({"turns": [{"content": "first"}, {"content": "second"}]})
    history = [*user("turns"), {"role": "assistant", "content": "first"}]

    second = await client.chat.completions.create(model="m", messages=history)
    assert second.choices[0].message.content == "second"
    assert second.id == "chatcmpl-1-0"

    history += [{"role": "user", "content": "and?"}, {"role": "assistant", "content": "second"}]
    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(model="m", messages=history)
    assert "the script has no turn 2" in raised.value.message


async def test_the_conversation_is_chosen_by_the_first_user_message(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    model.load(
        {
            "conversations": [
                {"match": "weather", "turns": [{"content": "sunny"}]},
                {"turns": [{"content": "default"}]},
                {"match": "news", "turns": [{"content": "headlines"}]},
            ]
        }
    )

    async def reply(text: str) -> str | None:
        completion = await client.chat.completions.create(model="m", messages=user(text))
        return completion.choices[0].message.content

    assert await reply("what is the news today") == "headlines"
    assert await reply("weather in Lyon?") == "sunny"
    assert await reply("something else") == "default"

    model.load({"conversations": [{"match": "weather", "turns": [{"content": "sunny"}]}]})
    with pytest.raises(openai.BadRequestError) as raised:
        await reply("something else")
    assert "no conversation in the script matches" in raised.value.message


async def test_a_rate_limit_fault_then_success(model: ScriptedModel, client: AsyncOpenAI) -> None:
    model.load(
        {"turns": [{"content": "after the limit", "faults": [{"status": 429, "retry_after": 1}]}]}
    )

    with pytest.raises(openai.RateLimitError) as raised:
        await client.chat.completions.create(model="m", messages=user("rate limited"))
    assert raised.value.response.headers["retry-after"] == "1"
    assert raised.value.status_code == 429

    completion = await client.chat.completions.create(model="m", messages=user("rate limited"))
    assert completion.choices[0].message.content == "after the limit"
    assert completion.id == "chatcmpl-0-1"


async def test_a_context_length_fault_is_a_bad_request_with_its_code(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    fault = {"status": 400, "code": "context_length_exceeded", "message": "too long"}
    model.load({"turns": [{"content": "x", "faults": [fault]}]})

    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(model="m", messages=user("too long"))

    assert raised.value.code == "context_length_exceeded"
    assert raised.value.type == "invalid_request_error"
    assert raised.value.message.endswith("too long")


async def test_a_dropped_stream_fails_after_its_first_chunks(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    model.load({"turns": [{"content": "one two three four five", "faults": [{"drop_after": 2}]}]})

    stream = await client.chat.completions.create(model="m", messages=user("dropped"), stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")

    assert "".join(received) == "one two "
    retry = await client.chat.completions.create(model="m", messages=user("dropped"), stream=True)
    assert (
        "".join([c.choices[0].delta.content or "" async for c in retry])
        == "one two three four five"
    )


async def test_a_dropped_whole_response_is_a_connection_error(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    model.load({"turns": [{"content": "whole", "faults": [{"drop_after": 0}]}]})

    with pytest.raises(openai.APIConnectionError):
        await client.chat.completions.create(model="m", messages=user("dropped whole"))


async def test_a_stalled_stream_pauses_then_completes(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    fault = {"stall_after": 1, "seconds": 0.4}
    model.load({"turns": [{"content": "slow and steady", "faults": [fault]}]})

    stream = await client.chat.completions.create(model="m", messages=user("stalled"), stream=True)
    arrivals: list[tuple[float, str]] = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.monotonic(), chunk.choices[0].delta.content))

    assert "".join(text for _, text in arrivals) == "slow and steady"
    assert arrivals[1][0] - arrivals[0][0] >= 0.35


async def test_the_request_log_records_turns_attempts_and_faults(
    model: ScriptedModel, client: AsyncOpenAI, log_file: Path
) -> None:
    faults = [{"status": 503}, {"ok": True}]
    model.load({"turns": [{"content": "a"}, {"content": "b", "faults": faults}]})
    history = [*user("logged"), {"role": "assistant", "content": "a"}]

    await client.chat.completions.create(model="m", messages=user("logged"), tools=TOOLS)
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=history, stream=True)
    await client.chat.completions.create(model="m", messages=history, stream=True)
    await client.chat.completions.create(model="m", messages=history)

    logged = entries(model, "logged")
    assert [(e["turn"], e["attempt"]) for e in logged] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert [e["fault"] for e in logged] == [None, {"status": 503}, {"ok": True}, None]
    assert [e["stream"] for e in logged] == [False, True, True, False]
    assert [e["messages"] for e in logged] == [1, 2, 2, 2]
    assert logged[0]["tools"] == ["search", "fetch"]
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [e for e in lines if e["conversation"] == "logged"] == logged


async def test_loading_a_script_resets_the_attempts(
    model: ScriptedModel, client: AsyncOpenAI
) -> None:
    script = {"turns": [{"content": "ok", "faults": [{"status": 500}]}]}
    for _ in range(2):
        model.load(script)
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=user("reset"))
    assert [e["attempt"] for e in entries(model, "reset")] == [0, 0]


async def test_models_lists_the_scripted_model(client: AsyncOpenAI) -> None:
    models = [m.id async for m in client.models.list()]
    assert models == ["scripted"]


def test_an_invalid_script_is_rejected(model: ScriptedModel) -> None:
    with pytest.raises(ValueError, match="fault is exactly one of"):
        model.load({"turns": [{"faults": [{"status": 500, "ok": True}]}]})


def test_a_server_that_cannot_start_reports_its_stderr() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)exited with code 2.*faults\[0\]"):
        with ScriptedModel({"turns": [{"faults": [{}]}]}):
            pass
