"""Pydantic AI's tool approvals (`requires_approval=True`) as Tether input waits.

An unchanged agent's deferred calls are answered inside its run (Pydantic AI's
`HandleDeferredToolCalls` with a resume token, Tether as the waiter), not by ending the run with
`DeferredToolRequests`: the agent needs no new output type, the task is `waiting`
(holding no worker) exactly at the gated calls, and the answer continues the same run,
its finished units replayed. A person answers as for Tether's own agents:
`{"approved": true}` for every call listed, or one call at a time with `call_id` (and
edited `arguments`, a patch over the model's, or a `reason` for a denial); the run asks
again until every call is decided.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from pydantic import JsonValue
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.external_events import ExternalEventWaiter
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext

from tether.agents.turns import approval_schema
from tether.integrations.pydantic_ai.running import current

Decision = Mapping[str, Any]


def prompt(requests: DeferredToolRequests, undecided: Sequence[str]) -> str:
    calls = [c for c in requests.approvals if c.tool_call_id in undecided]
    listed = "; ".join(f"{c.tool_call_id}: {c.tool_name}({c.args_as_json_str()})" for c in calls)
    if len(calls) == 1:
        return f"Approve this tool call? {listed}"
    return f"Approve these tool calls (each by its call_id, or all at once)? {listed}"


def decided_by(undecided: Sequence[str], answer: Any) -> dict[str, Decision]:
    """The calls `answer` decides: the one it names by `call_id`, else every one."""
    decision: Decision = answer if isinstance(answer, Mapping) else {"approved": bool(answer)}
    named = decision.get("call_id")
    if named is not None:
        return {named: decision} if named in undecided else {}
    return {call_id: decision for call_id in undecided}


def results(requests: DeferredToolRequests, decisions: Mapping[str, Decision]) -> JsonValue:
    """The `DeferredToolResults` (JSON) that carries the decisions into the run."""
    approvals: dict[str, JsonValue] = {}
    for call in requests.approvals:
        decision = decisions.get(call.tool_call_id, {"approved": False})
        if not decision.get("approved"):
            reason = decision.get("reason")
            message = "The user denied this tool call" + (f": {reason}" if reason else ".")
            approvals[call.tool_call_id] = {"kind": "tool-denied", "message": message}
        elif isinstance(patch := decision.get("arguments"), Mapping):
            args = {**call.args_as_dict(), **patch}
            approvals[call.tool_call_id] = {"kind": "tool-approved", "override_args": args}
        else:
            approvals[call.tool_call_id] = True
    return {"approvals": approvals}


class TetherWaiter(ExternalEventWaiter):
    """A run's wait for a person, as Tether input waits (`Journal.wait`): answered from
    the SDK, the CLI, the dashboard or MCP, each answer journaled."""

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,
    ) -> JsonValue:
        running = current()
        journal = running.journal
        if not running.pending:  # the user's own handler: its `ask` may answer at once
            token = f"{running.ctx.task_id}.{journal.step}.{journal.ran + journal.replayed}"
            early: JsonValue = await journal.unit(f"{name}.ask", lambda: ask(token))
            if early is not None:
                return early
            later: JsonValue = await journal.wait(name, f"Answer the deferred calls ({name})", {})
            return later
        requests = running.pending.pop()
        pending = [call.tool_call_id for call in requests.approvals]
        decisions: dict[str, Decision] = {}
        while undecided := [c for c in pending if c not in decisions]:
            asked = prompt(requests, undecided)
            answer = await journal.wait(name, asked, approval_schema(undecided))
            decisions.update(decided_by(undecided, answer))
        return results(requests, decisions)


def _nobody_at_once(
    ctx: RunContext[Any], requests: DeferredToolRequests, token: str
) -> DeferredToolResults | None:
    return None


def waits_for_answers(capability: object) -> bool:
    """Whether `capability` hands deferred calls to a person (its handler takes a resume
    token, Pydantic AI's rule: a third required positional parameter)."""
    if not isinstance(capability, HandleDeferredToolCalls):
        return False
    try:
        parameters = inspect.signature(capability.handler).parameters.values()
    except ValueError:
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 and positional[2].default is inspect.Parameter.empty


class TetherApprovals(HandleDeferredToolCalls[Any]):
    """`HandleDeferredToolCalls` whose wait Tether answers; added to each run of an
    agent that has no waiting handler of its own."""

    def __init__(self) -> None:
        super().__init__(_nobody_at_once, name="approval")

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        current().pending.append(requests)
        return await super().handle_deferred_tool_calls(ctx, requests=requests)
