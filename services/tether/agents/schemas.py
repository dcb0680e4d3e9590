"""A Tether tool as an OpenAI function tool: its registered JSON Schema, made an object.

The schema comes from the registry (`tether-tools`), so tools served by workers in
other languages are offered to the model the same way (and as the MCP gateway offers
them: `tether.schemas.tool_schema`).
"""

from __future__ import annotations

from typing import Any

from tether.schemas.tool_schema import arguments_schema
from tether.schemas.workers import ToolInfo


def function_tool(info: ToolInfo) -> tuple[dict[str, Any], bool]:
    """The `tools` entry for `info`, and whether its input is wrapped as `{"input": ...}`
    (function arguments are always an object; a tool may take a string or a list)."""
    parameters, wrapped = arguments_schema(info.input_schema)
    function: dict[str, Any] = {"name": info.name, "parameters": parameters}
    if info.description:
        function["description"] = info.description
    return {"type": "function", "function": function}, wrapped
