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
from tether.schemas.plans import StepSpec
from tether.schemas.tool_schema import unwrap
from tether.tools.results import NextSteps


def approval_schema(
    pending: Sequence[str], parameters: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The answer to an approval gate: for one call (`call_id`) or every call listed.

    `parameters`: per call, the JSON Schema of its tool's arguments. Edited `arguments`
    are a patch over the model's (each field given replaces that field), so each field
    given is checked against it when the answer comes, and a wrong one is named to the
    person who approved."""
    checks, defs = [], {}
    for call_id, schema in (parameters or {}).items():
        patch = {key: value for key, value in schema.items() if key not in ("required", "$defs")}
        defs.update({k: v for k, v in (schema.get("$defs") or {}).items() if k not in defs})
        when = {"properties": {"call_id": {"const": call_id}}, "required": ["call_id"]}
        checks.append({"if": when, "then": {"properties": {"arguments": patch}}})
    extra: dict[str, Any] = {"allOf": checks} if checks else {}
    if defs:
        extra["$defs"] = defs
    return {
        **extra,
        "type": "object",
        "properties": {
            "approved": {"type": "boolean", "description": "Run the tool call(s)?"},
            "reason": {"type": "string", "description": "Told to the model on a denial."},
            "call_id": {
                "type": "string",
                "enum": list(pending),
                "description": "The one call this answer is for; without it, every call listed.",
            },
            "arguments": {
                "type": "object",
                "description": "With call_id: run that call with these arguments instead.",
            },
        },
        "required": ["approved"],
        "dependentRequired": {"arguments": ["call_id"]},
    }


@dataclass(frozen=True)
class CallShape:
    """How a model's function call maps onto a tool's input (or what else it is: an MCP
    tool, a handoff), and whether a person approves it first."""

    wrapped: bool = False
    """The tool takes something other than an object: the model passes it as `input`."""
    approval: bool = False
    mcp_server: str | None = None
    """A tool of this MCP server: the agent's own step calls it (`McpCall`)."""
    safe: bool = False
    """(MCP) Calling it again after a crash is safe."""
    handoff: str | None = None
    """Not a tool: `transfer_to_<agent>`, handing the conversation over to that agent."""


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
    tools: Mapping[str, CallShape],
    typed: Typed | None = None,
    start: int = 0,
) -> Next:
    """What follows the reply of LLM turn `turn` (1-based) of the conversation that
    began at step `start`."""
    calls = calls_of(message)
    following = _step(agent, AgentStep(turn=turn + 1))
    handoffs = [c for c in calls if c.name in tools and tools[c.name].handoff is not None]
    if handoffs:  # the next turn is the other agent's (the other calls still run first)
        target = tools[handoffs[0].name].handoff
        assert target is not None
        following = _step(target, AgentStep(turn=turn + 1, handoff=start))
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
        if call in handoffs:
            taken = call is handoffs[0]
            results[call.id] = (
                f"Transferred to {tools[call.name].handoff}."
                if taken
                else "Error: the conversation was handed over once already in this turn."
            )
            continue
        branch = wrong if call.name == FINAL_ANSWER_TOOL and wrong else _branch(agent, call, tools)
        if isinstance(branch, str):
            results[call.id] = branch
        else:
            branches[call.id] = branch
    gated = [call.id for call in calls if call.id in branches and tools[call.name].approval]
    run = [call_id for call_id in branches if call_id not in gated]
    done = Turn(message=message, run=run, results=results, wrong_answer=wrong, gated=gated)
    group = [_group([branches[call_id] for call_id in run])] if run else []
    if gated:  # the others run at once; these wait for a person, each on its own
        gate = [_step(agent, AgentStep(approve=gated)), _step(agent, AgentStep(dispatch=turn))]
        return Next(output=to_builtins(done), steps=[*group, *gate, following])
    return Next(output=to_builtins(done), steps=[*group, following])


def after_approval(
    agent: str,
    turn: int,
    pending: Turn,
    answers: Sequence[tuple[Sequence[str], Any]],
    tools: Mapping[str, CallShape],
) -> Next:
    """After the approval gates since turn `turn`'s reply (each with the calls it asked
    for, and its answer): ask again for calls still undecided, else run the approved
    ones (with the arguments a person gave) and tell the model which were denied."""
    decided: dict[str, Any] = {}
    for asked, answer in answers:
        for call_id in _answered(asked, answer):
            decided.setdefault(call_id, answer)
    # A turn checkpointed before per-call gates lists its gated calls in `run`.
    gated = list(pending.gated) or [c for c in pending.run if c in _only(answers)]
    undecided = [call_id for call_id in gated if call_id not in decided]
    if undecided:
        steps = [_step(agent, AgentStep(approve=undecided)), _step(agent, AgentStep(dispatch=turn))]
        return Next(output={"undecided": undecided}, steps=steps)
    # A turn checkpointed before gates were per call ran no call before its gate.
    carried = [] if pending.gated else [c for c in pending.run if c not in gated]
    calls = {call.id: call for call in calls_of(pending.message)}
    results = dict(pending.results)
    edited: dict[str, str] = {}
    run: list[str] = []
    branches: list[StepSpec] = []
    for call_id in [*carried, *gated]:
        answer = decided.get(call_id, {"approved": True})
        if not answer.get("approved"):
            reason = answer.get("reason")
            results[call_id] = "The user denied this tool call" + (f": {reason}" if reason else ".")
            continue
        call = calls[call_id]
        if isinstance(answer.get("arguments"), dict):
            call = ToolCall(call.id, call.name, json.dumps(_patched(call, answer["arguments"])))
            edited[call_id] = call.arguments
        branch = _branch(agent, call, tools)
        if isinstance(branch, str):
            results[call_id] = branch
        else:
            run.append(call_id)
            branches.append(branch)
    done = Turn(message=pending.message, run=run, results=results, edited=edited)
    return Next(output=to_builtins(done), steps=[_group(branches)] if branches else [])


def _patched(call: ToolCall, edit: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments with the fields a person edited replaced."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return edit
    return {**arguments, **edit} if isinstance(arguments, dict) else edit


def _answered(asked: Sequence[str], answer: Any) -> list[str]:
    """The calls an answer decides: the one it names, or every call its gate asked for."""
    if not isinstance(answer, dict):
        return []
    call_id = answer.get("call_id")
    if call_id is None:
        return list(asked)
    return [call_id] if call_id in asked else []


def _only(answers: Sequence[tuple[Sequence[str], Any]]) -> set[str]:
    return {call_id for asked, _ in answers for call_id in asked}


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


def approval_prompt(turn: Turn, pending: Sequence[str]) -> str:
    calls = [call for call in calls_of(turn.message) if call.id in pending]
    listed = "; ".join(f"{call.id}: {call.name}({call.arguments})" for call in calls)
    if len(calls) == 1:
        return f"Approve this tool call? {listed}"
    return f"Approve these tool calls (each by its call_id, or all at once)? {listed}"


def _branch(agent: str, call: ToolCall, tools: Mapping[str, CallShape]) -> StepSpec | str:
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
    return StepSpec(tool=call.name, input=unwrap(arguments, shape.wrapped))


def turn_step(agent: str, turn: int) -> StepSpec:
    """The step of LLM turn `turn` of `agent`."""
    return _step(agent, AgentStep(turn=turn))


def guards(names: Sequence[str], value: Any) -> StepSpec:
    """Guardrails as one parallel step over `value`: any that trips fails the task."""
    return StepSpec(parallel=[StepSpec(tool=name, input=value) for name in names])


def result(next_: Next) -> Any:
    """What the step returns: its output, and the steps to run after it if any."""
    return NextSteps(steps=next_.steps, output=next_.output) if next_.steps else next_.output


def _group(branches: list[StepSpec]) -> StepSpec:
    return StepSpec(parallel=branches, collect_errors=True)


def _step(agent: str, role: AgentStep) -> StepSpec:
    return StepSpec(tool=agent, input=to_builtins(role))
