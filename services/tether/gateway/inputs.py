"""A waiting task's input request as an MCP elicitation, and the answer back (pure).

Elicitation forms are flat objects of primitive fields. A Tether tool may ask for any
JSON Schema: an object's fields that are not primitive are asked as JSON text (an
approval's edited `arguments`), and a schema that is not an object is wrapped in a
one-field form (`answer`); both are unwrapped on the way back. Both directions derive
the shape from the task record alone, so any gateway replica can send the form and take
the answer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.errors import TetherError
from tether.schemas.records import InputRequest, TaskRecord

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
    return schema.get("type") == "object" and isinstance(schema.get("properties", {}), dict)


def _wraps_json(schema: dict[str, Any]) -> bool:
    """True when the wrapped answer travels as JSON text (the schema is not a primitive)."""
    return not _is_primitive(schema)


def _field(schema: dict[str, Any]) -> dict[str, Any]:
    """A form field: a primitive as it is, anything else as JSON text."""
    if not _wraps_json(schema):
        return schema
    said = f"{schema['description']} " if isinstance(schema.get("description"), str) else ""
    matching = msgspec.json.encode(schema).decode()
    return {"type": "string", "description": f"{said}JSON matching {matching}"}


def requested_schema(request: InputRequest) -> dict[str, Any]:
    """The elicitation form for `request`."""
    schema = request.schema or {"type": "object"}
    if _is_form(schema):
        properties = schema.get("properties", {})
        form: dict[str, Any] = {
            "type": "object",
            "properties": {name: _field(field) for name, field in properties.items()},
        }
        if isinstance(schema.get("required"), list):
            form["required"] = schema["required"]
        return form
    field = _field(schema)
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
        properties = schema.get("properties", {})
        return {
            name: _unwrapped(name, value, properties[name])
            if isinstance(properties.get(name), dict)
            else value
            for name, value in content.items()
        }
    if ANSWER_FIELD not in content:
        raise AnswerError(f"the answer must carry the field {ANSWER_FIELD!r}")
    return _unwrapped(ANSWER_FIELD, content[ANSWER_FIELD], schema)


def _unwrapped(name: str, value: Any, schema: dict[str, Any]) -> Any:
    if not _wraps_json(schema):
        return value
    if not isinstance(value, str):
        raise AnswerError(f"{name!r} must be JSON text")
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        raise AnswerError(f"{name!r} is not valid JSON: {exc}") from exc
