"""OpenAI Agents SDK agents as durable Tether tools.

```python
from agents import Agent, function_tool

agent = Agent(name="helper", instructions="...", tools=[get_weather], model="gpt-4o-mini")
app.add(agent)  # served as the tool "helper": client.submit_agent("helper", "question")
```

The agent graph is copied (handoffs included; the user's objects are left alone): each
model call is a durable unit that streams its text to the task as the model writes, and
reserves and settles its tokens against the task's budget; each function tool call is a
unit (`idempotent(tool)`: not journaled), and so is each call to an MCP server's tool (one
a crash cut off is sent again only when its annotations say that is safe) and each
input or output guardrail's check. Tether connects the agents' MCP servers in the worker
that runs them. A tool that `needs_approval` makes the task wait for a person
(`client.send_input(task, {"approved": true})`). `Runner.run(agent, input,
ctx=ctx)` is the same inside a tool that calls the SDK itself.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, AgentOutputSchemaBase
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from tether.integrations.adapters import RunInput, foreign_tool
from tether.integrations.journal import Journal
from tether.integrations.openai_agents._clone import durable, idempotent
from tether.integrations.openai_agents._failures import step_error
from tether.integrations.openai_agents._mcp import Connections
from tether.integrations.openai_agents._runner import Runner, run_step
from tether.tools.context import StepContext
from tether.tools.tool import Tool

__all__ = ["Runner", "as_tool", "idempotent"]


def as_tool(agent: Agent[Any]) -> Tool:
    """`agent` as the Tether tool of its name, taking a run's input as Tether's agents do;
    its answer is the run's final output as JSON (`output_type`'s schema)."""
    connections = Connections()
    copy = durable(agent, connections)

    async def run(ctx: StepContext, step: RunInput, journal: Journal) -> Any:
        try:
            result = await run_step(copy, ctx, step, journal)
        except Exception as error:
            mapped = step_error(agent.name, error)
            if mapped is None:
                raise
            raise mapped from error
        return to_jsonable_python(result.final_output)

    return foreign_tool(
        agent.name,
        run,
        description=_description(agent),
        output_schema=_output_schema(agent),
        close=connections.close,
    )


def _description(agent: Agent[Any]) -> str:
    if agent.handoff_description:
        return agent.handoff_description
    if isinstance(agent.instructions, str) and agent.instructions:
        return agent.instructions
    return f"The agent {agent.name!r} (OpenAI Agents SDK)."


def _output_schema(agent: Agent[Any]) -> dict[str, Any] | None:
    kind = agent.output_type
    if kind is None or kind is str:
        return None
    if isinstance(kind, AgentOutputSchemaBase):
        return kind.json_schema()
    schema: dict[str, Any] = TypeAdapter(kind).json_schema()
    return schema
