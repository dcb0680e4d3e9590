"""A waiting task's input request as an MCP elicitation, and the answer back (pure).

Elicitation forms are flat objects of primitive fields. A Tether tool may ask for any
JSON Schema, so a schema that is not such a form is wrapped in a one-field form
(`answer`) and unwrapped on the way back; both directions derive the shape from the
task record alone, so any gateway replica can send the form and take the answer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.errors import TetherError
from tether.schemas.tasks import InputRequest, TaskRecord

ANSWER_FIELD = "answer"
_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})


def input_key(record: TaskRecord) -> str:
    """The `inputRequests` key of the task's current request: unique over the task's life.

    A step asks at most once per generation (its answer becomes its checkpoint).
    """
    return f"step-{record.current_step}-g{record.generation}"


def _is_primitive(schema: Any) -> bool:
    return isinstance(schema, dict) and (
        schema.get("type") in _PRIMITIVE_TYPES or isinstance(schema.get("enum"), list)
    )


def _is_form(schema: dict[str, Any]) -> bool:
    properties = schema.get("properties", {})
    return (
        schema.get("type") == "object"
        and isinstance(properties, dict)
        and all(_is_primitive(field) for field in properties.values())
    )


def _wraps_json(schema: dict[str, Any]) -> bool:
    """True when the wrapped answer travels as JSON text (the schema is not a primitive)."""
    return not _is_primitive(schema)


def requested_schema(request: InputRequest) -> dict[str, Any]:
    """The elicitation form for `request`."""
    schema = request.schema or {"type": "object"}
    if _is_form(schema):
        form: dict[str, Any] = {"type": "object", "properties": schema.get("properties", {})}
        if isinstance(schema.get("required"), list):
            form["required"] = schema["required"]
        return form
    if _wraps_json(schema):
        field: dict[str, Any] = {
            "type": "string",
            "description": "JSON matching " + msgspec.json.encode(schema).decode(),
        }
    else:
        field = schema
    return {"type": "object", "properties": {ANSWER_FIELD: field}, "required": [ANSWER_FIELD]}


def elicitation_params(request: InputRequest) -> dict[str, Any]:
    """`elicitation/create` params (form mode) asking the task's question."""
    return {"mode": "form", "message": request.prompt, "requestedSchema": requested_schema(request)}


def input_requests(record: TaskRecord) -> dict[str, Any]:
    """The 2026-07-28 `inputRequests` of a waiting task: one elicitation under `input_key`."""
    if record.input_request is None:
        return {}
    return {
        input_key(record): {
            "method": "elicitation/create",
            "params": elicitation_params(record.input_request),
        }
    }


class AnswerError(TetherError, ValueError):
    """An elicitation answer that cannot be turned into the task's input."""


def answer(request: InputRequest, content: dict[str, Any] | None) -> Any:
    """The value to send to the task, from the accepted form's `content`."""
    content = content or {}
    schema = request.schema or {"type": "object"}
    if _is_form(schema):
        return content
    if ANSWER_FIELD not in content:
        raise AnswerError(f"the answer must carry the field {ANSWER_FIELD!r}")
    value = content[ANSWER_FIELD]
    if not _wraps_json(schema):
        return value
    if not isinstance(value, str):
        raise AnswerError(f"{ANSWER_FIELD!r} must be JSON text")
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        raise AnswerError(f"{ANSWER_FIELD!r} is not valid JSON: {exc}") from exc
