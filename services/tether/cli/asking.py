"""What `--wait` and `watch` say when a task starts waiting for a person (pure): that it
waits, its question, the exact command that answers it, and that the follower waits on.

Said once, as a line of its own: a person following a task on a terminal would
otherwise see only `waiting` and a hint to read `--help`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from tether.schemas.codec import encode
from tether.schemas.events import Waiting

TOKENS_EXAMPLE = 100_000
"""The number a question whose answer needs none (a budget: `{"tokens": N}`) is shown
with: one worth copying, not a placeholder that would stop the run at once."""


def example_value(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """A value the JSON Schema accepts (its required fields filled with placeholders;
    `$ref`s into its `$defs` followed)."""
    root = schema if root is None else root
    if isinstance(ref := schema.get("$ref"), str) and ref.startswith("#/$defs/"):
        return example_value(root.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {}), root)
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or "properties" in schema:
        fields = schema.get("properties", {})
        return {
            name: example_value(fields.get(name, {}), root) for name in schema.get("required", [])
        }
    placeholders = {"string": "text", "integer": 1, "number": 1.5, "boolean": True, "array": []}
    return placeholders.get(str(kind), "text")


def answer_example(schema: Mapping[str, Any]) -> Any:
    """An answer the question's schema accepts: its required fields filled, or, when none
    is required (a budget's `tokens`, `usd` or `stop`), its first field."""
    value = example_value(schema)
    fields = schema.get("properties")
    if value != {} or not isinstance(fields, Mapping) or not fields:
        return value
    name, field = next(iter(fields.items()))
    if isinstance(field, Mapping) and field.get("type") == "integer":
        return {name: TOKENS_EXAMPLE}
    return {name: example_value(field, schema) if isinstance(field, Mapping) else "text"}


def answer_command(task_id: str, schema: Mapping[str, Any]) -> str:
    """`tether input ID '{"approved": true}'`, quoted for a POSIX shell."""
    answer = encode(answer_example(schema)).decode()
    return f"tether input {task_id} {shlex.quote(answer)}"


def waiting_line(event: Waiting) -> str | None:
    """The line for a `waiting` event that asks a person (None for a timer or a child)."""
    asked = event.input_request
    if asked is None:
        return None
    return (
        f"task {event.task_id} waits for a person: {' '.join(asked.prompt.split())} | "
        f"answer with: {answer_command(event.task_id, asked.schema)} | "
        "still following it: this ends when the task does (Ctrl-C stops following, "
        "not the task)"
    )
