"""Tether tools as MCP tools, and MCP tool arguments as Tether steps (pure).

MCP requires an object schema at the root of a tool's `inputSchema`. A Tether tool
may take any type (a list, a string, a `$ref` to a struct), so a root that is not an
object is wrapped as `{"input": ...}`; the call unwraps it again, deciding from the
same advertised schema, so any gateway replica maps a call the same way.
"""

from __future__ import annotations

from typing import Any, Literal

import mcp_types as types
import msgspec

from tether.errors import InvalidTaskError
from tether.schemas.plans import StepSpec
from tether.schemas.tool_schema import WRAPPED_FIELD, arguments_schema, unwrap
from tether.schemas.workers import ToolInfo
from tether.tasks.conformance import mismatch
from tether.tasks.plans import to_step, validate_steps

RUN_PLAN = "run_plan"
"""The gateway's own tool: run a whole list of steps as one durable task."""

TaskSupport = Literal["forbidden", "optional", "required"]

RUN_PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "minItems": 1,
            "description": "The steps to run in order. A step without `input` receives the "
            "previous step's output.",
            "items": {
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "description": "A tool listed by this server."},
                    "input": {"description": "The tool's input."},
                },
                "required": ["tool"],
            },
        }
    },
    "required": ["steps"],
}
RUN_PLAN_DESCRIPTION = (
    "Run several tools as one durable Tether task: each step's output is checkpointed, "
    "a crash costs at most the running step, and the task runs on if the client leaves."
)


def input_schema(advertised: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The MCP `inputSchema` for a tool's advertised schema, and whether it is wrapped
    (the same object schema an agent's model is offered: `tether.schemas.tool_schema`)."""
    return arguments_schema(advertised)


def task_support(name: str) -> TaskSupport:
    """A plan is durable work by nature: `run_plan` needs a task; single tools run either way."""
    return "required" if name == RUN_PLAN else "optional"


def mcp_tool(info: ToolInfo, *, legacy: bool) -> types.Tool:
    schema, _ = input_schema(info.input_schema)
    return types.Tool(
        name=info.name,
        description=info.description or None,
        input_schema=schema,
        output_schema=info.output_schema,
        execution=types.ToolExecution(task_support=task_support(info.name)) if legacy else None,
    )


def run_plan_tool(*, legacy: bool) -> types.Tool:
    return types.Tool(
        name=RUN_PLAN,
        description=RUN_PLAN_DESCRIPTION,
        input_schema=RUN_PLAN_SCHEMA,
        execution=types.ToolExecution(task_support=task_support(RUN_PLAN)) if legacy else None,
    )


def tool_step(info: ToolInfo, arguments: dict[str, Any] | None) -> StepSpec:
    """The single step that runs `info` with the MCP call's arguments."""
    arguments = arguments or {}
    schema, wrapped = input_schema(info.input_schema)
    problem = mismatch(schema, arguments)
    if problem is not None:
        raise InvalidTaskError(
            f"invalid arguments for tool {info.name!r}: {problem} (see its inputSchema)"
        )
    if wrapped and WRAPPED_FIELD not in arguments:
        raise InvalidTaskError(
            f"tool {info.name!r} takes its input in the argument {WRAPPED_FIELD!r}: "
            f'call it with {{"{WRAPPED_FIELD}": ...}}'
        )
    return StepSpec(tool=info.name, input=unwrap(arguments, wrapped))


class _Plan(msgspec.Struct, forbid_unknown_fields=True):
    steps: list[dict[str, Any]]


def plan_steps(arguments: dict[str, Any] | None) -> list[StepSpec]:
    """The steps of a `run_plan` call; InvalidTaskError names what is wrong."""
    try:
        plan = msgspec.convert(arguments or {}, _Plan)
    except msgspec.ValidationError as exc:
        raise InvalidTaskError(
            f'run_plan takes {{"steps": [{{"tool": ..., "input": ...}}, ...]}}: {exc}'
        ) from exc
    if not plan.steps:
        raise InvalidTaskError("run_plan needs at least one step")
    steps = [to_step(step) for step in plan.steps]
    validate_steps(steps, "run_plan")
    return steps
