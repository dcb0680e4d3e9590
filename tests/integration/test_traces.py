"""OpenTelemetry traces: one trace per task from submit through every step, a span per
attempt, GenAI spans for an agent's LLM calls; the context crosses processes in NATS
headers, also from a client in another language that sets `traceparent` itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.apps.agents import app as agents
from tests.apps.tools import app
from tests.conftest import MakeWorker, Raw
from tether import Client, NatsConfig, Step
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    """The SDK's provider for this process (OpenTelemetry allows one per process)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(SimpleSpanProcessor(EXPORTER))
    yield
    EXPORTER.clear()


def _spans(trace_id: int) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.context.trace_id == trace_id]


async def _traced(trace_id: int, names: list[str]) -> list[ReadableSpan]:
    """The trace's spans once every name in `names` has ended (spans end asynchronously)."""

    async def ended() -> None:
        got = [s.name for s in _spans(trace_id)]
        assert all(got.count(n) >= names.count(n) for n in set(names)), got

    await eventually(ended, timeout=10)
    return _spans(trace_id)


async def test_a_task_is_one_trace_from_the_clients_span_through_every_step_attempt(
    client: Client, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker([app, agents])
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as parent:
        handle = await client.submit(["fast", Step(tool="flaky", input={"succeed_on": 2})])
    await handle.wait(timeout=20)
    trace_id = parent.get_span_context().trace_id

    spans = await _traced(trace_id, ["execute_tool fast", *["execute_tool flaky"] * 2])
    steps = [s for s in spans if s.name.startswith("execute_tool")]
    flaky = sorted((s for s in steps if s.name == "execute_tool flaky"), key=_attempt)
    assert [(_attempt(s), s.attributes["tether.outcome"]) for s in flaky] == [
        (1, "retried"),
        (2, "completed"),
    ]
    fast = next(s for s in steps if s.name == "execute_tool fast")
    assert fast.attributes["tether.task_id"] == handle.task_id
    assert fast.attributes["gen_ai.tool.name"] == "fast"
    assert fast.parent is not None and fast.parent.span_id == parent.get_span_context().span_id


def _attempt(span: ReadableSpan) -> Any:
    return span.attributes["tether.attempt"] if span.attributes else 0


async def test_an_agent_has_genai_spans_for_its_llm_calls_and_tool_calls(
    client: Client, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker([app, agents])
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "spans"}}]}
    answer = {"content": "Traced.", "usage": {"prompt_tokens": 33, "completion_tokens": 3}}
    model.load({"conversations": [{"match": "trace question", "turns": [search, answer]}]})
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("ask") as parent:
        handle = await client.submit_agent("researcher", "trace question")
    await handle.wait(timeout=30)

    names = ["invoke_agent researcher", "chat scripted", "execute_tool web_search"]
    spans = await _traced(parent.get_span_context().trace_id, [*names, *names[:2]])
    chats = [s for s in spans if s.name == "chat scripted"]
    assert len(chats) == 2  # two turns, each LLM call once
    last = next(
        s for s in chats if s.attributes and s.attributes["gen_ai.usage.input_tokens"] == 33
    )
    assert last.attributes is not None
    assert last.attributes["gen_ai.request.model"] == "scripted"
    assert last.attributes["gen_ai.usage.output_tokens"] == 3
    assert last.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert last.attributes["gen_ai.conversation.id"] == handle.task_id
    assert "gen_ai.output.messages" not in last.attributes  # content is opt-in only
    turns = {s.context.span_id for s in spans if s.name == "invoke_agent researcher"}
    assert all(c.parent is not None and c.parent.span_id in turns for c in chats)


async def test_a_traceparent_set_by_another_languages_client_is_the_tasks_trace(
    raw: Raw, config: NatsConfig, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker([app, agents])
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    task = {"task_id": "traced-raw", "steps": [{"tool": "fast", "input": 1}]}
    headers = {"Nats-Msg-Id": "traced-raw", "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    await raw.js.publish(
        config.names.submit_subject("traced-raw"), json.dumps(task).encode(), headers=headers
    )

    spans = await _traced(int(trace_id, 16), ["execute_tool fast"])

    assert spans[0].parent is not None and spans[0].parent.span_id == 0x00F067AA0BA902B7
