"""Tools from MCP servers, the pure parts: what the model is offered, which calls are safe
to send again, how a result reads, and the branch a call becomes."""

from __future__ import annotations

import mcp_types as types

from tether.agents.mcp_tools import listed, result_text
from tether.agents.turns import CallShape, after_reply

SERVER = "http://tools.example/mcp"


def _tool(name: str, **hints: bool) -> types.Tool:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    annotations = types.ToolAnnotations(**hints) if hints else None
    return types.Tool(name=name, description="Find.", input_schema=schema, annotations=annotations)


def test_a_tool_is_safe_to_send_again_only_when_read_only_or_idempotent() -> None:
    assert listed(SERVER, _tool("a", read_only_hint=True)).safe
    assert listed(SERVER, _tool("b", read_only_hint=False, idempotent_hint=True)).safe
    assert not listed(SERVER, _tool("c", destructive_hint=True)).safe
    assert not listed(SERVER, _tool("d")).safe  # no hints: assume the worst
    offered = listed(SERVER, _tool("a")).function()
    assert offered == {
        "type": "function",
        "function": {
            "name": "a",
            "description": "Find.",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"],
            },
        },
    }


def test_a_result_reads_as_its_structured_content_or_its_text_and_errors_say_so() -> None:
    text = types.TextContent(type="text", text="found")
    assert result_text(types.CallToolResult(content=[text])) == "found"
    structured = types.CallToolResult(content=[text], structured_content={"n": 1})
    assert result_text(structured) == '{"n": 1}'
    failed = types.CallToolResult(
        content=[types.TextContent(type="text", text="no")], is_error=True
    )
    assert result_text(failed) == "Error: no"


def test_a_call_of_an_mcp_tool_is_a_branch_of_the_agents_own_step() -> None:
    tools = {"find": CallShape(mcp_server=SERVER, safe=True)}
    call = {"id": "c0", "type": "function", "function": {"name": "find", "arguments": '{"q": "x"}'}}
    reply = {"role": "assistant", "content": None, "tool_calls": [call]}
    group, _ = after_reply("clerk", 1, reply, tools).steps
    assert group.parallel is not None
    (branch,) = group.parallel
    assert branch.tool == "clerk"
    assert branch.input == {
        "mcp": {"server": SERVER, "tool": "find", "arguments": {"q": "x"}, "safe": True}
    }
