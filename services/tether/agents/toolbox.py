"""An agent's toolbox for one turn: the function specs its model is offered, and how
each call it may make maps onto a step (`CallShape`).

Its Tether tools come from the registry (a sub-agent is offered as a question, nothing
else), its handoffs as `transfer_to_<agent>` functions without arguments, and the tools
of its MCP servers as they list them. Two tools of one name are refused: a model could
not tell them apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from tether.agents.schemas import function_tool
from tether.agents.turns import CallShape
from tether.errors import RetryableError, TerminalError

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.tools.context import StepContext

Shapes = dict[str, CallShape]
Specs = list[dict[str, Any]]
SUB_AGENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "The question or task for the agent."}
    },
    "required": ["input"],
}
"""What a model sees of an agent it may call: a question (it runs as a child task)."""


async def toolbox(agent: Agent, ctx: StepContext) -> tuple[Shapes, Specs]:
    """Every call the agent's model may make this turn, and the specs it is offered."""
    shapes: Shapes = {}
    specs: Specs = []
    await _tether_tools(agent, ctx, shapes, specs)
    await _handoffs(agent, ctx, shapes, specs)
    await _mcp_tools(agent, shapes, specs)
    return shapes, specs


async def _tether_tools(agent: Agent, ctx: StepContext, shapes: Shapes, specs: Specs) -> None:
    gated = agent.approval_names
    for name in agent.tool_names:
        info = await agent.runtime.tool_info(ctx, name)
        if info is None:
            raise RetryableError(
                f"agent {agent.name!r}: tool {name!r} is not registered yet; start a "
                "worker that serves it"
            )
        if info.agent:  # a sub-agent: the model gives it a question, nothing else
            info = msgspec.structs.replace(info, input_schema=SUB_AGENT_SCHEMA)
        spec, wrapped = function_tool(info)
        shapes[name] = CallShape(wrapped=wrapped, approval=info.approval or name in gated)
        specs.append(spec)


async def _handoffs(agent: Agent, ctx: StepContext, shapes: Shapes, specs: Specs) -> None:
    for target in agent.handoffs:
        info = await agent.runtime.tool_info(ctx, target)
        if info is None or not info.agent:
            raise RetryableError(
                f"agent {agent.name!r} hands over to {target!r}, which no worker serves "
                "as an agent yet: start one that does (or take it out of handoffs)"
            )
        name = f"transfer_to_{target}"
        shapes[name] = CallShape(handoff=target)
        about = f"Hand the conversation over to the agent {target!r}: {info.description}"
        function = {
            "name": name,
            "description": about,
            "parameters": {"type": "object", "properties": {}},
        }
        specs.append({"type": "function", "function": function})


async def _mcp_tools(agent: Agent, shapes: Shapes, specs: Specs) -> None:
    for tool in await agent.runtime.mcp_tools(tuple(agent.mcp_servers)):
        if tool.name in shapes:
            raise TerminalError(
                f"agent {agent.name!r}: two tools are named {tool.name!r} (one from the "
                f"MCP server {tool.server}): a model cannot tell them apart; take one "
                "out of its tools or mcp_servers"
            )
        approval = tool.name in agent.approval_names
        shapes[tool.name] = CallShape(approval=approval, mcp_server=tool.server, safe=tool.safe)
        specs.append(tool.function())
