"""An agent's typed answer: its JSON Schema as the model is asked for it, and the check
of what the model answered (pure, no I/O).

The answer is asked for with `response_format` `json_schema` (strict when the schema
allows it), or, from an endpoint that refuses that, as the arguments of a final-answer
tool. Either way it is checked against the type; a wrong answer goes back to the model
with the error, naming the field, and the model answers again.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from tether.agents.errors import InvalidOutput as InvalidOutput
from tether.agents.errors import WrongAnswer as WrongAnswer
from tether.schemas import types
from tether.schemas.tool_schema import inline_root

FINAL_ANSWER_TOOL = "final_answer"
DEFAULT_OUTPUT_RETRIES = 2


@dataclass(frozen=True, eq=False)
class OutputType:
    """What an agent answers with: a msgspec Struct, a Pydantic model, a dataclass (any
    type `tether.schemas.types` converts into), or a JSON Schema (a dict) for an answer
    kept as plain JSON."""

    name: str
    schema: dict[str, Any]
    """The schema as advertised (an object at the root, `$defs` kept)."""
    type: Any | None
    """The Python type answers decode into; None for a schema given as a dict."""

    @property
    def strict(self) -> bool:
        """Whether OpenAI's strict mode can hold the model to the schema: every object
        closed and every property required (an optional field would be left out)."""
        return _strict_ready(self.schema)

    def response_format(self) -> dict[str, Any]:
        schema = _closed(self.schema) if self.strict else self.schema
        spec = {"name": self.name, "schema": schema, "strict": self.strict}
        return {"type": "json_schema", "json_schema": spec}

    def final_tool(self) -> dict[str, Any]:
        """The function tool a model calls with its answer, for endpoints without
        `response_format` `json_schema`."""
        description = f"Give your final answer (a {self.name}); call this once, last."
        function = {"name": FINAL_ANSWER_TOOL, "description": description}
        return {"type": "function", "function": {**function, "parameters": self.schema}}

    def check(self, answer: str) -> Any:
        """The answer (JSON text) as plain JSON values, if it fits; raises WrongAnswer."""
        try:
            value = msgspec.json.decode(answer)
        except msgspec.DecodeError as exc:
            raise WrongAnswer(f"the answer is not JSON ({exc})") from exc
        if self.type is not None:
            try:
                return types.to_builtins(types.convert(value, self.type))
            except msgspec.ValidationError as exc:
                raise WrongAnswer(str(exc)) from exc
        return _checked_by_schema(value, self.schema)

    def decode(self, value: Any) -> Any:
        """A stored answer as the type (the value as it is for a schema given as a dict)."""
        return value if self.type is None else types.convert(value, self.type)


def output_type(spec: Any) -> OutputType:
    """The `output_type` of `Agent(...)`, checked when the agent is defined."""
    if isinstance(spec, dict):
        name = str(spec.get("title") or "answer")
        schema, kind = spec, None
    else:
        try:
            schema = types.json_schema(spec)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"output_type {spec!r} is not a type msgspec can describe, nor a Pydantic "
                "model: give a msgspec Struct, a Pydantic model, a dataclass, a TypedDict "
                "or a JSON Schema (a dict)"
            ) from exc
        name, kind = getattr(spec, "__name__", "answer"), spec
    schema = inline_root(schema)
    if schema.get("type") != "object":
        raise TypeError(
            f"output_type {name!r} must describe a JSON object (a Struct or dataclass), "
            f"not {schema.get('type') or schema}: put the value in a field"
        )
    return OutputType(name=re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64], schema=schema, type=kind)


def correction(error: str, *, tool: bool) -> str:
    """What the model is told after a wrong answer."""
    again = f"call {FINAL_ANSWER_TOOL} again" if tool else "answer again with JSON only"
    return f"Your answer does not fit the required schema: {error}. Fix it and {again}."


def _objects(schema: Any) -> list[dict[str, Any]]:
    """Every object schema inside `schema` (nested properties, items, unions, `$defs`)."""
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            found.append(schema)
        for value in schema.values():
            found.extend(_objects(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(_objects(value))
    return found


def _strict_ready(schema: dict[str, Any]) -> bool:
    for obj in _objects(schema):
        properties = obj.get("properties") or {}
        if set(obj.get("required") or []) != set(properties):
            return False
        if obj.get("additionalProperties") not in (None, False):
            return False
    return True


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with `additionalProperties: false` on every object (strict mode's rule)."""
    closed = copy.deepcopy(schema)
    for obj in _objects(closed):
        obj["additionalProperties"] = False
    return closed


def _checked_by_schema(value: Any, schema: dict[str, Any]) -> Any:
    import jsonschema  # the `mcp` client's dependency; only schemas given as dicts need it

    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return value
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    raise WrongAnswer(f"{error.message} - at `${where}`")
