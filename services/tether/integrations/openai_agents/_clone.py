"""A durable copy of an agent graph: the user's agents are left as they are; the copies'
function tools, MCP servers' calls and guardrails are units of the journal and their
models durable. Handoffs (agents or `handoff(...)` objects) lead to copies too."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from agents import Agent, FunctionTool, Handoff, Model, RunContextWrapper
from agents.tool_context import ToolContext

from tether.integrations.openai_agents import _scope
from tether.integrations.openai_agents._guardrails import durable_guardrails
from tether.integrations.openai_agents._mcp import Connections, durable_servers
from tether.integrations.openai_agents._model import DurableModel
from tether.schemas.records import Usage

T = TypeVar("T", bound=FunctionTool)
IDEMPOTENT = "_tether_idempotent"


def idempotent(tool: T) -> T:
    """Mark a function tool safe to run again: it is not journaled, so a replay runs it
    again (a read, a lookup) instead of storing its output."""
    setattr(tool, IDEMPOTENT, True)
    return tool


def durable(
    agent: Agent[Any],
    connections: Connections | None = None,
    seen: dict[int, Agent[Any]] | None = None,
) -> Agent[Any]:
    """`agent` and what it hands off to, copied with durable models, tools, MCP servers
    (connected through `connections`; None: by their owner) and guardrails."""
    seen = {} if seen is None else seen
    if id(agent) in seen:
        return seen[id(agent)]
    model = agent.model
    if isinstance(model, Model) and not isinstance(model, DurableModel):
        model = DurableModel(model, getattr(model, "model", None) or type(model).__name__)
    copy = agent.clone(
        model=model,
        tools=[_tool(t) for t in agent.tools],
        mcp_servers=durable_servers(agent.mcp_servers, connections),
        input_guardrails=durable_guardrails(agent.input_guardrails, "input"),
        output_guardrails=durable_guardrails(agent.output_guardrails, "output"),
    )
    seen[id(agent)] = copy
    copy.handoffs = [_handoff(h, connections, seen) for h in agent.handoffs]
    return copy


def _handoff(
    target: Agent[Any] | Handoff[Any, Any],
    connections: Connections | None,
    seen: dict[int, Agent[Any]],
) -> Any:
    if isinstance(target, Agent):
        return durable(target, connections, seen)
    invoke = target.on_invoke_handoff

    async def on_invoke_handoff(context: RunContextWrapper[Any], arguments: str) -> Any:
        return durable(await invoke(context, arguments), connections, seen)

    return dataclasses.replace(target, on_invoke_handoff=on_invoke_handoff)


def _tool(tool: Any) -> Any:
    if not isinstance(tool, FunctionTool) or getattr(tool, IDEMPOTENT, False):
        return tool
    invoke = tool.on_invoke_tool
    agent_tool = bool(getattr(tool, "_is_agent_tool", False))

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
        scope = _scope.current.get()
        if scope is None or scope.journal is None:
            return await invoke(context, arguments)
        ran = []

        async def body() -> dict[str, Any]:
            ran.append(True)
            await scope.ctx.progress(message=f"calling {tool.name}")
            if not agent_tool:
                return {"output": _scope.as_json(await invoke(context, arguments))}
            # A sub-agent's calls run live inside this one unit: journaled one by one they
            # would take places a replay of the whole unit does not take.
            spent: list[Usage] = []
            token = _scope.current.set(dataclasses.replace(scope, journal=None, spent=spent))
            try:
                output = await invoke(context, arguments)
            finally:
                _scope.current.reset(token)
            usage = _scope.summed(spent)
            return {
                "output": _scope.as_json(output),
                "step": scope.ctx.step,
                "attempt": scope.ctx.attempt,
                "usage": usage,
            }

        payload = await scope.journal.unit(f"tool.{tool.name}", body, call=context.tool_call_id)
        if not ran:  # a sub-agent an attempt that died ran: counted once
            await scope.journal.recount.unit(payload, _scope.replayed_usage(payload), ())
        return payload["output"]

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
