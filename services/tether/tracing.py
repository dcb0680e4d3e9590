"""OpenTelemetry traces: one trace per task, a span per step attempt, GenAI spans for LLM
turns. Off unless configured by the standard `OTEL_*` variables (`pip install
'tether[otel]'` brings the SDK and the OTLP exporter).

The task's trace context travels as W3C `traceparent` (and `tracestate`): a client
(in any language) sets it as a header of its submission; the dispatcher keeps it in
the task record (`trace`), and every worker that runs a step starts its span under it.
Nothing is replayed, so each attempt's span is emitted once, by the worker that ran it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tether.schemas.records import TaskRecord, Usage

log = logging.getLogger("tether.tracing")
TRACER = trace.get_tracer("tether")
W3C_KEYS = ("traceparent", "tracestate")
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def enabled() -> bool:
    """Whether a real tracer provider is installed (the API alone records nothing)."""
    return type(trace.get_tracer_provider()).__name__ not in (
        "ProxyTracerProvider",
        "NoOpTracerProvider",
    )


def configure(service: str) -> bool:
    """Install the SDK's provider and OTLP (or console) exporter when the `OTEL_*`
    variables ask for traces; the SDK reads the rest of them itself."""
    wanted = os.environ.get("OTEL_TRACES_EXPORTER")
    if wanted in (None, "none") and not any(
        os.environ.get(name)
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        log.warning("OTEL_* asks for traces, but the SDK is missing: pip install 'tether[otel]'")
        return False
    exporter: SpanExporter
    if wanted == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    name = os.environ.get("OTEL_SERVICE_NAME", service)
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True


def carrier(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The W3C trace headers among `headers`, if it has a `traceparent`."""
    if not headers or "traceparent" not in headers:
        return None
    return {key: headers[key] for key in W3C_KEYS if key in headers}


def current() -> dict[str, str] | None:
    """The caller's current trace context as headers (None outside any span)."""
    if not enabled():
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return carrier(headers)


def task_context(headers: Mapping[str, str] | None, task_id: str) -> dict[str, str] | None:
    """A new task's trace: the submitter's, or a root span of its own when tracing is on."""
    given = carrier(headers)
    if given is not None or not enabled():
        return given
    with TRACER.start_as_current_span(f"submit {task_id}", kind=SpanKind.PRODUCER) as span:
        span.set_attribute("tether.task_id", task_id)
        return current()


@contextlib.contextmanager
def step_span(
    record: TaskRecord, step: int, branch: int | None, tool: str, attempt: int, agent: bool
) -> Iterator[Span | None]:
    """The span of one step attempt, under the task's trace (nothing when tracing is off)."""
    if not enabled():
        yield None
        return
    parent = propagate.extract(record.trace or {})
    operation = "invoke_agent" if agent else "execute_tool"
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.conversation.id": record.task_id,
        "tether.task_id": record.task_id,
        "tether.step": step,
        "tether.tool": tool,
        "tether.attempt": attempt,
    }
    attributes["gen_ai.agent.name" if agent else "gen_ai.tool.name"] = tool
    if branch is not None:
        attributes["tether.branch"] = branch
    with TRACER.start_as_current_span(
        f"{operation} {tool}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


def outcome(span: Span | None, result: str, error: BaseException | None = None) -> None:
    if span is None:
        return
    span.set_attribute("tether.outcome", result)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)))


@contextlib.contextmanager
def chat_span(model: str, task_id: str) -> Iterator[Span | None]:
    """A GenAI `chat {model}` span around one LLM call (inside its step's span)."""
    if not enabled():
        yield None
        return
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.conversation.id": task_id,
    }
    with TRACER.start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def chat_reply(
    span: Span | None, usage: Usage, finish_reason: str | None, message: dict[str, Any]
) -> None:
    if span is None:
        return
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    if os.environ.get(CAPTURE_CONTENT, "").lower() == "true":  # message content: opt-in only
        import json

        span.set_attribute("gen_ai.output.messages", json.dumps([message]))
