"""Pydantic AI agents run durably on Tether: `app.add(agent)`.

An unchanged `pydantic_ai.Agent` becomes a tool like Tether's own agents. Each model
request, tool call, MCP call and event-handler call of a run is a durable unit (Pydantic
AI's `durable_exec` builder with Tether's journal as engine), so a crash re-runs only
the call that was in flight; the model's text streams to the task live, each model call
is reserved against the task's budget and counted on it, and `requires_approval` tools
make the task wait for a person's answer. Imported only when such an agent is added.
"""

from __future__ import annotations

from tether.integrations.pydantic_ai.approvals import TetherApprovals
from tether.integrations.pydantic_ai.durability import TetherDurability
from tether.integrations.pydantic_ai.running import step_context
from tether.integrations.pydantic_ai.tool import as_tool

__all__ = ["TetherApprovals", "TetherDurability", "as_tool", "step_context"]
