"""The Pydantic AI adapter without a server: the user's agent is left as it was (and
runs as before outside Tether), and a person's answers become Pydantic AI's decisions."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests

from tether import App
from tether.errors import DefinitionError
from tether.integrations.pydantic_ai import TetherDurability, as_tool
from tether.integrations.pydantic_ai.approvals import decided_by, results


def _agent(**options: object) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(TestModel(), name="plain", **options)  # type: ignore[call-overload]

    @agent.tool_plain
    def double(n: int) -> int:
        return 2 * n

    return agent


async def test_added_agent_is_unchanged_and_runs_as_before_outside_tether() -> None:
    agent = _agent()
    before = agent.root_capability
    App("a").add(agent)

    assert agent.root_capability is before
    assert TetherDurability.from_agent(agent) is None
    result = await agent.run("double 2")
    assert result.output


def test_an_agent_needs_a_name_and_no_other_durability_engine() -> None:
    with pytest.raises(DefinitionError, match='name="helper"'):
        as_tool(Agent(TestModel()))
    tool = as_tool(_agent(capabilities=[TetherDurability()]))
    assert tool.name == "plain" and tool.agent


def test_an_answer_without_call_id_decides_every_call_listed() -> None:
    assert decided_by(["a", "b"], {"approved": True}) == {
        "a": {"approved": True},
        "b": {"approved": True},
    }
    assert decided_by(["a", "b"], {"approved": False, "call_id": "b"}) == {
        "b": {"approved": False, "call_id": "b"}
    }
    assert decided_by(["a"], {"approved": True, "call_id": "z"}) == {}


def test_decisions_become_deferred_tool_results() -> None:
    calls = [
        ToolCallPart("send", {"to": "x", "cc": "y"}, tool_call_id="a"),
        ToolCallPart("send", {"to": "x"}, tool_call_id="b"),
        ToolCallPart("send", {"to": "x"}, tool_call_id="c"),
    ]
    requests = DeferredToolRequests(approvals=calls)
    decisions = {
        "a": {"approved": True, "arguments": {"to": "z"}},
        "b": {"approved": False, "reason": "no"},
    }

    assert results(requests, decisions) == {
        "approvals": {
            "a": {"kind": "tool-approved", "override_args": {"to": "z", "cc": "y"}},
            "b": {"kind": "tool-denied", "message": "The user denied this tool call: no"},
            "c": {"kind": "tool-denied", "message": "The user denied this tool call."},
        }
    }
