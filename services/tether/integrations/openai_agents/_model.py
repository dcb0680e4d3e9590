"""The agent's model as durable units: each call streams its text to the task live,
reserves and settles its tokens, and is journaled whole (`ModelResponse`), so a replay
gets the same response back without a call."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    TResponseInputItem,
    Usage,
)
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter

from tether.integrations.openai_agents import _scope
from tether.integrations.openai_agents._scope import Scope
from tether.schemas.records import Usage as TaskUsage

RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)


class DurableModel(Model):
    """`wrapped`, each call a unit of the running step's journal (outside a Tether step:
    `wrapped` itself)."""

    def __init__(self, wrapped: Model, name: str) -> None:
        self.wrapped, self.name = wrapped, name

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **rest: Any,
    ) -> ModelResponse:
        call = _Call(system_instructions, input, model_settings, tools, output_schema)
        call.more = {"handoffs": handoffs, "tracing": tracing, **rest}
        scope = _scope.current.get()
        if scope is None:
            return await self.wrapped.get_response(**call.kwargs(model_settings))
        if scope.journal is None:
            return await self._live(scope, call)
        ran = []

        async def body() -> dict[str, Any]:
            ran.append(True)
            response = await self._live(scope, call)
            return {
                "step": scope.ctx.step,
                "attempt": scope.ctx.attempt,
                "response": RESPONSE.dump_python(response, mode="json"),
                "usage": _task_usage(response.usage, self.name),
            }

        journal = scope.journal
        payload = await journal.unit(f"model.{self.name}", body, turn=True)
        response = RESPONSE.validate_python(payload["response"])
        if not ran:  # an earlier attempt's, maybe one that died: said and counted once
            usage = _scope.replayed_usage(payload)
            await journal.recount.unit(payload, usage, _texts(response))
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """`Runner.run_streamed`: the unit's response as one completed event (its text
        reached the task's stream while the model wrote it)."""
        return _as_events(self.get_response(*args, **kwargs))

    async def _live(self, scope: Scope, call: _Call) -> ModelResponse:
        """One real call: reserved against the budget (its cap sent as `max_tokens`),
        streamed to the task, settled at what the model reported."""
        settings = call.settings
        sent = len(json.dumps([call.system, call.input], default=str))
        meter = await scope.metered()
        mark = None if scope.journal is None else scope.journal.call_mark()  # a unit's call
        cap = await meter.reserve(self.name, sent, settings.max_tokens, mark)
        if cap is not None:
            settings = dataclasses.replace(settings, max_tokens=cap)
        if settings.include_usage is None:  # the SDK asks only api.openai.com by default
            settings = dataclasses.replace(settings, include_usage=True)
        try:
            response = await self._stream(scope, call.kwargs(settings))
        except BaseException as error:
            await meter.release(error)
            raise
        usage = msgspec.convert(_task_usage(response.usage, self.name), TaskUsage)
        counted = await meter.settle(usage)
        if scope.spent is not None:
            scope.spent.append(counted)
        return response

    async def _stream(self, scope: Scope, kwargs: dict[str, Any]) -> ModelResponse:
        done: list[Any] = []
        async for event in self.wrapped.stream_response(**kwargs):
            if isinstance(event, ResponseTextDeltaEvent):
                await scope.ctx.stream(event.delta)
            elif isinstance(event, ResponseOutputItemDoneEvent):
                done.append(event.item)
            elif isinstance(event, ResponseCompletedEvent):
                final = event.response
                return ModelResponse(
                    output=final.output or done,
                    usage=_usage(final.usage),
                    response_id=final.id,
                )
        raise RuntimeError(
            f"model {self.name!r} ended its stream without a completed response: "
            "check that its endpoint streams OpenAI events"
        )


def _texts(response: ModelResponse) -> list[str]:
    """The text of a response, to stream again when the attempt that streamed it died
    (see `Recount.unit`)."""
    return [
        part.text
        for item in response.output
        for part in getattr(item, "content", None) or []
        if getattr(part, "type", None) == "output_text" and part.text
    ]


@dataclasses.dataclass
class _Call:
    """One model call's arguments (the SDK passes them by keyword)."""

    system: str | None
    input: str | list[TResponseInputItem]
    settings: ModelSettings
    tools: list[Tool]
    output_schema: AgentOutputSchemaBase | None
    more: dict[str, Any] = dataclasses.field(default_factory=dict)

    def kwargs(self, settings: ModelSettings) -> dict[str, Any]:
        return {
            "system_instructions": self.system,
            "input": self.input,
            "model_settings": settings,
            "tools": self.tools,
            "output_schema": self.output_schema,
            **self.more,
        }


def _usage(reported: Any) -> Usage:
    """A response's usage as the SDK counts it (one request)."""
    if reported is None:
        return Usage(requests=1)
    details = {
        name: value
        for name in ("input_tokens_details", "output_tokens_details")
        if (value := getattr(reported, name, None)) is not None
    }
    return Usage(
        requests=1,
        input_tokens=reported.input_tokens,
        output_tokens=reported.output_tokens,
        total_tokens=reported.total_tokens,
        **details,
    )


def _task_usage(usage: Usage, model: str) -> dict[str, Any]:
    """One call's usage as the task counts it (JSON, journaled with the response)."""
    cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else 0
    counted = TaskUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=cached or 0,
        requests=1,
        model=model,
    )
    built: dict[str, Any] = msgspec.to_builtins(counted)
    return built


async def _as_events(response: Any) -> AsyncIterator[Any]:
    from openai.types.responses import Response, ResponseUsage

    got: ModelResponse = await response
    usage = ResponseUsage(
        input_tokens=got.usage.input_tokens,
        output_tokens=got.usage.output_tokens,
        total_tokens=got.usage.total_tokens,
        input_tokens_details=got.usage.input_tokens_details,
        output_tokens_details=got.usage.output_tokens_details,
    )
    whole = Response(
        id=got.response_id or "tether",
        created_at=0,
        model="tether",
        object="response",
        output=got.output,
        parallel_tool_calls=False,
        tool_choice="auto",
        tools=[],
        usage=usage,
    )
    yield ResponseCompletedEvent(type="response.completed", response=whole, sequence_number=0)


class DurableProvider(ModelProvider):
    """Models named by strings (`Agent(model="gpt-4o-mini")`), resolved by the SDK's own
    provider (OpenAI from `OPENAI_BASE_URL` / `OPENAI_API_KEY`), each one durable."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner

    def get_model(self, model_name: str | None) -> Model:
        model = self.inner.get_model(model_name)
        return model if isinstance(model, DurableModel) else DurableModel(model, model_name or "")
