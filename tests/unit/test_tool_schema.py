"""One way to read a tool's schema: the agent's function spec and the MCP `inputSchema`
of a tool are the same object schema, and a call's arguments unwrap the same way."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tether.agents.schemas import function_tool
from tether.gateway.tools import input_schema, tool_step
from tether.schemas.plans import StepSpec
from tether.schemas.tool_schema import arguments_schema, inline_root, unwrap
from tether.schemas.workers import ToolInfo


class Query(msgspec.Struct):
    query: str
    limit: int = 5


class Hit(msgspec.Struct):
    url: str


class Tree(msgspec.Struct):
    name: str
    children: list[Tree] = []


def _info(schema: dict[str, Any]) -> ToolInfo:
    return msgspec.convert(
        {"name": "search", "input_schema": schema, "updated_at": "2026-12-01T00:00:00Z"}, ToolInfo
    )


@pytest.mark.parametrize(
    "schema",
    [
        msgspec.json.schema(Query),
        msgspec.json.schema(list[Hit]),
        msgspec.json.schema(str),
        msgspec.json.schema(Tree),
        {},
    ],
    ids=["struct", "list-of-structs", "string", "recursive", "any"],
)
def test_the_agent_and_the_gateway_offer_a_tool_the_same_way(schema: dict[str, Any]) -> None:
    spec, agent_wrapped = function_tool(_info(schema))
    mcp_schema, mcp_wrapped = input_schema(schema)
    assert spec["function"]["parameters"] == mcp_schema
    assert agent_wrapped == mcp_wrapped
    assert mcp_schema["type"] == "object"


def test_a_struct_is_inlined_and_a_list_wrapped_with_its_defs_at_the_top() -> None:
    struct, wrapped = arguments_schema(msgspec.json.schema(Query))
    assert not wrapped and struct["required"] == ["query"] and "$defs" not in struct
    listing, wrapped = arguments_schema(msgspec.json.schema(list[Hit]))
    assert wrapped and listing["required"] == ["input"]
    assert listing["properties"]["input"] == {"type": "array", "items": {"$ref": "#/$defs/Hit"}}
    assert set(listing["$defs"]) == {"Hit"}


def test_a_recursive_struct_keeps_the_definition_it_refers_to() -> None:
    inlined = inline_root(msgspec.json.schema(Tree))
    assert inlined["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    assert "Tree" in inlined["$defs"]


def test_arguments_unwrap_by_the_same_rule_for_a_model_and_an_mcp_client() -> None:
    assert unwrap({"input": ["a"]}, wrapped=True) == ["a"]
    assert unwrap({"input": None}, wrapped=True) is None
    assert unwrap({"query": "q"}, wrapped=False) == {"query": "q"}
    assert unwrap({"input": "x"}, wrapped=False) == {"input": "x"}
    info = _info(msgspec.json.schema(list[str]))
    assert tool_step(info, {"input": ["a"]}) == StepSpec(tool="search", input=["a"])
