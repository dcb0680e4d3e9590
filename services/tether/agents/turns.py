"""What follows a model's reply, and an approval's answer: pure decisions over plain data.

A reply without tool calls is the agent's answer. A reply with tool calls becomes a
parallel group (one branch per call, errors collected so the model sees them) and the
next turn; calls of tools that need approval go through a gate first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.agents.conversation import AgentStep, McpCall, ToolCall, Turn, calls_of
from tether.agents.output import (
    FINAL_ANSWER_TOOL,
    InvalidOutput,
    OutputType,
    WrongAnswer,
    correction,
)
from tether.schemas.codec import to_builtins
from tether.schemas.tasks import StepSpec

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the tool call(s)?"},
        "reason": {"type": "string", "description": "Told to the model on a denial."},
    },
    "required": ["approved"],
}


@dataclass(frozen=True)
class ToolShape:
    """How a tool's input maps onto a function call's JSON object of arguments."""

    wrapped: bool = False
    """The tool takes something other than an object: the model passes it as `input`."""
    approval: bool = False
    mcp_server: str | None = None
    """A tool of this MCP server: the agent's own step calls it (`McpCall`)."""
    safe: bool = False
    """(MCP) Calling it again after a crash is safe."""


@dataclass(frozen=True)
class Typed:
    """How a typed answer is asked for and checked in this turn."""

    output: OutputType
    tool: bool
    """Asked for as a final-answer tool call (else as `response_format`)."""
    wrong_so_far: int
    retries: int
    """Wrong answers told to the model before the task fails."""


@dataclass(frozen=True)
class Next:
    """A step's output and the steps to run after it (empty: the agent has answered)."""

    output: Any
    steps: list[StepSpec]


def after_reply(
    agent: str,
    turn: int,
    message: dict[str, Any],
    tools: Mapping[str, ToolShape],
    typed: Typed | None = None,
) -> Next:
    """What follows the reply of LLM turn `turn` (1-based)."""
    calls = calls_of(message)
    following = _step(agent, AgentStep(turn=turn + 1))
    wrong: str | None = None
    if typed is not None:
        answer = _typed_answer(message, calls, typed)
        if not isinstance(answer, WrongAnswer):
            return Next(output=answer, steps=[])
        wrong = _told(agent, answer, typed)
        if not calls:
            done = Turn(message=message, run=[], wrong_answer=wrong)
            return Next(output=to_builtins(done), steps=[following])
    elif not calls:
        return Next(output=message.get("content") or "", steps=[])
    branches: dict[str, StepSpec] = {}
    results: dict[str, str] = {}
    for call in calls:
        branch = wrong if call.name == FINAL_ANSWER_TOOL and wrong else _branch(agent, call, tools)
        if isinstance(branch, str):
            results[call.id] = branch
        else:
            branches[call.id] = branch
    done = Turn(message=message, run=list(branches), results=results, wrong_answer=wrong)
    gated = [call.id for call in calls if call.id in branches and tools[call.name].approval]
    if gated:
        gate = [_step(agent, AgentStep(approve=gated)), _step(agent, AgentStep(dispatch=turn))]
        return Next(output=to_builtins(done), steps=[*gate, following])
    group = [_group(list(branches.values()))] if branches else []
    return Next(output=to_builtins(done), steps=[*group, following])


def after_approval(
    agent: str, turn: Turn, gated: Sequence[str], answer: Any, tools: Mapping[str, ToolShape]
) -> Next:
    """Run what was approved; tell the model what was denied, and why."""
    approved = isinstance(answer, dict) and answer.get("approved") is True
    reason = answer.get("reason") if isinstance(answer, dict) else None
    denial = "The user denied this tool call" + (f": {reason}" if reason else ".")
    results = dict(turn.results)
    run = []
    for call_id in turn.run:
        if call_id in gated and not approved:
            results[call_id] = denial
        else:
            run.append(call_id)
    decided = Turn(message=turn.message, run=run, results=results)
    calls = {call.id: call for call in calls_of(turn.message)}
    branches = [_branch(agent, calls[call_id], tools) for call_id in run]
    steps = [_group([b for b in branches if isinstance(b, StepSpec)])] if run else []
    return Next(output=to_builtins(decided), steps=steps)


def _typed_answer(
    message: dict[str, Any], calls: Sequence[ToolCall], typed: Typed
) -> Any | WrongAnswer:
    """The answer as plain JSON if the reply gives one that fits, else WrongAnswer: with
    the reason, or empty when the reply only asks for tools (no answer yet)."""
    if typed.tool:
        final = [call for call in calls if call.name == FINAL_ANSWER_TOOL]
        if not final:
            if calls:
                return WrongAnswer("")  # tools to run first: not an answer yet
            return WrongAnswer(f"no answer was given: call {FINAL_ANSWER_TOOL}")
        text = final[-1].arguments or "{}"
    elif calls:
        return WrongAnswer("")
    else:
        text = message.get("content") or ""
    try:
        return typed.output.check(text)
    except WrongAnswer as wrong:
        return wrong


def _told(agent: str, wrong: WrongAnswer, typed: Typed) -> str | None:
    """What the model is told of a wrong answer (None: it asked for tools, no answer yet);
    raises InvalidOutput once it has been told `typed.retries` times."""
    if not str(wrong):
        return None
    if typed.wrong_so_far >= typed.retries:
        raise InvalidOutput(
            f"agent {agent!r} answered with a {typed.output.name} that does not fit, "
            f"{typed.wrong_so_far + 1} times; the last: {wrong}"
        )
    return correction(str(wrong), tool=typed.tool)


def approval_prompt(turn: Turn, gated: Sequence[str]) -> str:
    calls = [call for call in calls_of(turn.message) if call.id in gated]
    listed = "; ".join(f"{call.name}({call.arguments})" for call in calls)
    return f"Approve {'this tool call' if len(calls) == 1 else 'these tool calls'}: {listed}?"


def _branch(agent: str, call: ToolCall, tools: Mapping[str, ToolShape]) -> StepSpec | str:
    """The branch that runs `call`, or the result the model gets instead of running it."""
    shape = tools.get(call.name)
    if shape is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"Error: there is no tool named {call.name!r} (tools: {known})."
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"Error: the arguments of {call.name} are not JSON ({exc}); call it again."
    if not isinstance(arguments, dict):
        return f"Error: the arguments of {call.name} must be a JSON object."
    if shape.mcp_server is not None:
        mcp = McpCall(server=shape.mcp_server, tool=call.name, arguments=arguments, safe=shape.safe)
        return _step(agent, AgentStep(mcp=mcp))
    value = arguments.get("input") if shape.wrapped else arguments
    return StepSpec(tool=call.name, input=value if value is not None else arguments)


def _group(branches: list[StepSpec]) -> StepSpec:
    return StepSpec(parallel=branches, collect_errors=True)


def _step(agent: str, role: AgentStep) -> StepSpec:
    return StepSpec(tool=agent, input=to_builtins(role))
