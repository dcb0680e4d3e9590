"""Whether a value fits a JSON Schema (pure): answers to input requests, MCP arguments.

Every way of answering a waiting task (SDK, CLI, API, MCP) goes through
`TaskService.send_input`, so `check_answer` there covers them all.
"""

from __future__ import annotations

from typing import Any

from tether.errors import InvalidTaskError
from tether.schemas.records import InputRequest


def mismatch(schema: dict[str, Any], value: Any) -> str | None:
    """The first way `value` breaks `schema` ("$.approved: 'yes' is not of type
    'boolean'"), or None; a schema no validator understands accepts anything."""
    if not schema:
        return None
    import jsonschema  # ~50 ms to import: only the callers that check pay for it

    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(value))
    if error is None:
        return None
    where = error.json_path if error.path else "the value"
    return f"{where}: {error.message}"


def check_answer(task_id: str, request: InputRequest, answer: Any) -> None:
    """Raise InvalidTaskError naming the first mismatch with the request's schema."""
    problem = mismatch(request.schema, answer)
    if problem is not None:
        raise InvalidTaskError(
            f"answer to task {task_id!r} does not match its input request: {problem} "
            f"('tether status {task_id}' shows the question)"
        )
