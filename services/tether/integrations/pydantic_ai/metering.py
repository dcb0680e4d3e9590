"""A Pydantic AI model call, bounded by the task tree's budget and counted on the task
(I/O): the model that sends a request inside a unit reserves the call's worst case
first, sends the cap it got as the request's `max_tokens`, and settles at what the
provider reported (or releases the hold when the call failed); while it is in flight it
is marked under its unit's place, so a call a dead attempt sent still counts."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models.wrapper import WrapperModel

from tether.integrations.pydantic_ai.running import current
from tether.schemas.records import Usage

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import ModelRequestParameters, StreamedResponse
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import RunContext
    from pydantic_ai.usage import RequestUsage


def usage_of(response: Any) -> Usage:
    """The Tether usage of one response: a `ModelResponse`, or its JSON (a journaled unit)."""
    if isinstance(response, ModelResponse):
        return _usage(response.usage, response.model_name)
    found = response.get("usage") or {} if isinstance(response, dict) else {}
    return Usage(
        input_tokens=int(found.get("input_tokens", 0)),
        output_tokens=int(found.get("output_tokens", 0)),
        cached_tokens=int(found.get("cache_read_tokens", 0)),
        requests=1,
        model=response.get("model_name") if isinstance(response, dict) else None,
    )


def _usage(usage: RequestUsage, model: str | None) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cache_read_tokens,
        requests=1,
        model=model,
    )


class MeteredModel(WrapperModel):
    """The model as it sends a request from inside a unit: reserved, capped, settled."""

    async def _capped(
        self, messages: list[ModelMessage], settings: ModelSettings | None
    ) -> ModelSettings | None:
        sent = len(ModelMessagesTypeAdapter.dump_json(messages))
        asked = (settings or {}).get("max_tokens")
        running = current()
        mark = running.journal.call_mark()
        cap = await running.meter.reserve(self.model_name, sent, asked, mark)
        if cap is None:
            return settings
        capped: dict[str, Any] = {**(settings or {}), "max_tokens": cap}
        return capped  # type: ignore[return-value]

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        meter = current().meter
        settings = await self._capped(messages, model_settings)
        try:
            response = await self.wrapped.request(messages, settings, model_request_parameters)
        except BaseException as error:
            await meter.release(error)
            raise
        await meter.settle(_usage(response.usage, response.model_name or self.model_name))
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        meter = current().meter
        settings = await self._capped(messages, model_settings)
        try:
            async with self.wrapped.request_stream(
                messages, settings, model_request_parameters, run_context
            ) as stream:
                yield stream
        except BaseException as error:
            await meter.release(error)
            raise
        response = stream.get()
        await meter.settle(_usage(response.usage, response.model_name or self.model_name))
