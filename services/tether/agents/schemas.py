"""A Tether tool as an OpenAI function tool: its registered JSON Schema, made an object.

The schema comes from the registry (`tether-tools`), so tools served by workers in
other languages are offered to the model the same way.
"""

from __future__ import annotations

from typing import Any

from tether.schemas.tasks import ToolInfo


def function_tool(info: ToolInfo) -> tuple[dict[str, Any], bool]:
    """The `tools` entry for `info`, and whether its input is wrapped as `{"input": ...}`
    (function arguments are always an object; a tool may take a string or a list)."""
    schema = inline_root(info.input_schema)
    wrapped = bool(schema) and schema.get("type") != "object"
    if wrapped:
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": {"input": schema},
            "required": ["input"],
        }
        if "$defs" in schema:
            parameters["$defs"] = schema.pop("$defs")
    else:
        parameters = schema or {"type": "object", "properties": {}}
    function: dict[str, Any] = {"name": info.name, "parameters": parameters}
    if info.description:
        function["description"] = info.description
    return {"type": "function", "function": function}, wrapped


def inline_root(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec puts a Struct's schema under `$defs` with a `$ref` at the top; models want
    the object itself at the top (nested `$ref`s keep working through `$defs`)."""
    ref = schema.get("$ref")
    defs = schema.get("$defs") or {}
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return dict(schema)
    target = dict(defs.get(ref.removeprefix("#/$defs/"), {}))
    others = {name: value for name, value in defs.items() if f"#/$defs/{name}" != ref}
    if others:
        target["$defs"] = defs  # nested references may still point at the top one
    return target
