"""What a graph shows while it runs, sent out live (I/O): its models' tokens to the
task's token stream as they are written (LangGraph's `messages` stream mode), and each
node's start and end as the step's progress (its `tasks` mode), which `tether watch`
and the dashboard show.

An attempt that died took its report with it: followers drop its streamed text, and
the worker never counted its usage. So an attempt that finds the thread moved on since
its step began streams again the text of the model messages added since, and counts
the usage of those that no earlier attempt's failure counted (each failure keeps the
ids of the messages it counted, `counted_name`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage

from tether.schemas.records import Usage

if TYPE_CHECKING:
    from tether.tools.context import StepContext


async def relay(ctx: StepContext, part: Any) -> None:
    """One item of `astream(stream_mode=["messages", "tasks"], subgraphs=True)`."""
    namespace, mode, chunk = part
    if mode == "messages":
        message = chunk[0]
        if isinstance(message, AIMessage) and (text := str(message.text)):
            await ctx.stream(text)
    elif mode == "tasks" and not namespace:  # a subgraph's nodes are inside its node's
        await ctx.progress(message=node_said(chunk))


def node_said(event: dict[str, Any]) -> str:
    """A node's start or end, as a line of progress."""
    name = event.get("name", "?")
    if "input" in event:
        return f"node {name} started"
    if event.get("error") is not None:
        return f"node {name} failed: {event['error']}"
    if event.get("interrupts"):
        return f"node {name} waits for an answer"
    return f"node {name} finished"


def counted_name(attempt: int) -> str:
    """The memo where attempt `attempt` of a step that ended by an error keeps the ids
    of the messages whose usage it counted (the worker counted them with it)."""
    return f"graph-counted-a{attempt}"


async def counted_before(ctx: StepContext) -> set[str]:
    """Messages whose usage an earlier attempt of this step counted."""
    found = [ctx.recall(counted_name(n), type=list[str]) for n in range(1, ctx.attempt)]
    return {message for ids in await asyncio.gather(*found) for message in ids or ()}


def added(then: Iterable[Any], now: Iterable[Any]) -> list[AIMessage]:
    """The model messages in `now` that were not in `then`, in order."""
    before = {m.id for m in then if isinstance(m, BaseMessage)}
    return [m for m in now if isinstance(m, AIMessage) and m.id not in before]


async def replay(ctx: StepContext, messages: list[AIMessage], counted: list[str]) -> None:
    """Stream again what earlier attempts of the step said (`messages`), and count what
    they spent that no report carried; the ids counted join `counted`."""
    already = await counted_before(ctx)
    for message in messages:
        if text := str(message.text):
            await ctx.stream(text)
        if message.id is None or message.id in already:
            continue
        usage = message_usage(message)
        if usage is not None:
            ctx.add_usage(usage)
            counted.append(message.id)


def message_usage(message: AIMessage) -> Usage | None:
    reported = message.usage_metadata
    if not reported:
        return None
    cached = (reported.get("input_token_details") or {}).get("cache_read") or 0
    model = message.response_metadata.get("model_name")
    return Usage(
        input_tokens=reported["input_tokens"],
        output_tokens=reported["output_tokens"],
        cached_tokens=int(cached),
        requests=1,
        model=model if isinstance(model, str) else None,
    )


async def failed(ctx: StepContext, counted: list[str]) -> None:
    """This attempt ends by an error and the worker counts its usage: keep which
    messages that was, so a later attempt does not count them again."""
    ids = sorted(set(counted))
    await asyncio.shield(ctx.once(counted_name(ctx.attempt), lambda: ids))
