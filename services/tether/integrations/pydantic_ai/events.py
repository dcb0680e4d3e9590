"""What a Pydantic AI run shows while it runs, sent out live (I/O): the model's text to
the task's token stream as it is written (inside the model's unit, so a replayed unit
streams nothing), and each tool call and result as the step's progress (each in a unit
of its own, so a follower sees it once). A response read back from an attempt that died
is streamed again, once, by the attempt that finishes the run (`texts`)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)

from tether.integrations.pydantic_ai.running import running_now

if TYPE_CHECKING:
    from pydantic_ai.agent import EventStreamHandler
    from pydantic_ai.messages import AgentStreamEvent
    from pydantic_ai.tools import RunContext

    from tether.tools.context import StepContext


def said(event: AgentStreamEvent) -> tuple[str | None, str | None]:
    """The event as (text for the token stream, message for progress), either None."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content or None, None
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta or None, None
    if isinstance(event, FunctionToolCallEvent):
        return None, f"calling {event.part.tool_name}"
    if isinstance(event, FunctionToolResultEvent):
        return None, f"{event.part.tool_name} returned"
    return None, None


async def publish(ctx: StepContext, event: AgentStreamEvent) -> None:
    text, message = said(event)
    if text is not None:
        await ctx.stream(text)
    if message is not None:
        await ctx.progress(message=message)


def texts(response: Any) -> list[str]:
    """The text parts of a journaled response (JSON), to stream again when the attempt
    that streamed them died (see `Recount.unit`)."""
    parts = response.get("parts", []) if isinstance(response, dict) else []
    return [p["content"] for p in parts if p.get("part_kind") == "text" and p.get("content")]


def relay(then: EventStreamHandler[Any] | None) -> EventStreamHandler[Any]:
    """The capability's handler: each event goes to Tether, then to `then` (the user's)."""

    async def handler(run: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        running = running_now()

        async def sent() -> AsyncIterator[AgentStreamEvent]:
            async for event in events:
                if running is not None:
                    await publish(running.ctx, event)
                yield event

        if then is None:
            async for _ in sent():
                pass
        else:
            await then(run, sent())

    return handler
