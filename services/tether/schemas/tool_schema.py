"""A tool's JSON Schema as a call's arguments (pure): one way for every reader.

msgspec puts a Struct's schema under `$defs` with a `$ref` at the top, and a tool may
take any type (a string, a list); a model's function call and an MCP `tools/call` pass
one JSON object of arguments. So a root `$ref` is inlined, a root that is not an object
is wrapped as `{"input": ...}`, and a call's arguments are unwrapped again, deciding from
the same advertised schema. The agent's function spec, the MCP gateway's `inputSchema`
and the deploy checks read a tool's schema here, so every door offers a tool the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WRAPPED_FIELD = "input"
"""The one argument a tool whose input is not an object takes its input in."""
_DEFS_PREFIX = "#/$defs/"


def inline_root(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec puts a Struct's schema under `$defs` with a `$ref` at the top; models want
    the object itself at the top (nested `$ref`s keep working through `$defs`)."""
    ref = schema.get("$ref")
    defs = schema.get("$defs") or {}
    if not isinstance(ref, str) or not ref.startswith(_DEFS_PREFIX):
        return dict(schema)
    target = dict(defs.get(ref.removeprefix(_DEFS_PREFIX), {}))
    others = {name: value for name, value in defs.items() if f"{_DEFS_PREFIX}{name}" != ref}
    if others or _refers(target, ref):
        target["$defs"] = defs  # nested references may still point at the top one
    return target


def arguments_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The object schema a call's arguments follow, for a tool's advertised input
    `schema`, and whether the input is wrapped as `{"input": ...}` (a tool that takes a
    string or a list; `{}`, any input or none, takes an empty object)."""
    inlined = inline_root(schema)
    if not inlined:
        return {"type": "object", "properties": {}}, False
    if inlined.get("type") == "object":
        return inlined, False
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {WRAPPED_FIELD: inlined},
        "required": [WRAPPED_FIELD],
    }
    if "$defs" in inlined:
        wrapper["$defs"] = inlined.pop("$defs")
    return wrapper, True


def unwrap(arguments: Mapping[str, Any], wrapped: bool) -> Any:
    """The tool's input from a call's arguments: a wrapped tool's `input` (a caller that
    left the wrapper out passes its arguments as they are)."""
    if wrapped and WRAPPED_FIELD in arguments:
        return arguments[WRAPPED_FIELD]
    return arguments


def _refers(value: Any, ref: str) -> bool:
    """Whether `ref` occurs as a `$ref` anywhere in `value` (a recursive type)."""
    if isinstance(value, dict):
        return value.get("$ref") == ref or any(_refers(item, ref) for item in value.values())
    if isinstance(value, list):
        return any(_refers(item, ref) for item in value)
    return False
