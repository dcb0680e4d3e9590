"""Runs of the SDK inside a Tether step: `as_tool`'s run (approvals become input waits)
and the `Runner` drop-in for tools that call the SDK themselves."""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import agents
from agents import Agent, Model, ModelSettings, RunConfig, RunResult, RunResultStreaming

from tether.integrations.adapters import RunInput
from tether.integrations.journal import Journal
from tether.integrations.meter import Meter
from tether.integrations.openai_agents import _scope
from tether.integrations.openai_agents._clone import durable
from tether.integrations.openai_agents._guardrails import durable_guardrails
from tether.integrations.openai_agents._input import input_items
from tether.integrations.openai_agents._model import DurableModel, DurableProvider
from tether.integrations.openai_agents._scope import Scope
from tether.tools.context import StepContext

APPROVAL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string", "description": "Why not (told to the model)."},
    },
    "required": ["approved"],
}
"""A person's answer to a tool call that `needs_approval`."""

SETTINGS = frozenset(f.name for f in dataclasses.fields(ModelSettings))


def run_config(base: RunConfig | None, settings: dict[str, Any] | None = None) -> RunConfig:
    """`base` (default: tracing off, so no spans leave for OpenAI) with durable models and
    guardrails; its function tools run as the SDK runs them, at once (each call's unit is
    keyed by its call id, so a replay meets them in any order)."""
    base = base or RunConfig(tracing_disabled=True)
    provider = base.model_provider
    model = base.model
    if isinstance(model, Model) and not isinstance(model, DurableModel):
        model = DurableModel(model, getattr(model, "model", None) or type(model).__name__)
    model_settings = base.model_settings
    chosen = {k: v for k, v in (settings or {}).items() if k in SETTINGS}
    if chosen:
        model_settings = (model_settings or ModelSettings()).resolve(ModelSettings(**chosen))
    return dataclasses.replace(
        base,
        model=model,
        model_provider=provider
        if isinstance(provider, DurableProvider)
        else DurableProvider(provider),
        model_settings=model_settings,
        input_guardrails=durable_guardrails(base.input_guardrails, "input"),
        output_guardrails=durable_guardrails(base.output_guardrails, "output"),
    )


async def run_waiting(
    agent: Agent[Any], input: Any, scope: Scope, config: RunConfig, **kwargs: Any
) -> RunResult:
    """A run to its end: each tool call that needs approval asks a person through the
    journal (`Journal.wait`: the task waits, holding no worker), and the run goes on with
    the answer. A resumed run replays up to the same interruptions, so no state is kept
    but the journal's."""
    journal = scope.journal
    assert journal is not None
    token = _scope.current.set(scope)
    try:
        result = await agents.Runner.run(agent, input, run_config=config, **kwargs)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                answer = await journal.wait(f"approval.{item.name}", _prompt(item), APPROVAL)
                approved, reason = _decision(answer)
                if approved:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=reason)
            result = await agents.Runner.run(agent, state, run_config=config, **kwargs)
        return result
    finally:
        _scope.current.reset(token)


def _prompt(item: agents.ToolApprovalItem) -> str:
    arguments = getattr(item.raw_item, "arguments", None)
    return f'Approve the call of {item.name}({arguments or ""})? Answer {{"approved": true}}'


def _decision(answer: Any) -> tuple[bool, str | None]:
    if isinstance(answer, dict):
        reason = answer.get("reason")
        return bool(answer.get("approved")), reason if isinstance(reason, str) else None
    if isinstance(answer, str):
        return answer.strip().lower() in {"y", "yes", "approve", "approved", "true"}, None
    return bool(answer), None


async def run_step(
    copy: Agent[Any], ctx: StepContext, step: RunInput, journal: Journal
) -> RunResult:
    """`as_tool`'s run of `copy` (an agent's durable copy) for one step's input."""
    meter = await Meter.open(ctx, step)
    agent = copy if step.instructions is None else copy.clone(instructions=step.instructions)
    config = run_config(None, step.settings)
    return await run_waiting(agent, input_items(step.input), Scope(ctx, journal, meter), config)


_journals: weakref.WeakKeyDictionary[StepContext, Scope] = weakref.WeakKeyDictionary()


def _step_scope(ctx: StepContext) -> Scope:
    """One journal per step, whatever number of runs the tool makes in it."""
    found = _journals.get(ctx)
    if found is None:
        found = _journals[ctx] = Scope(ctx, Journal(ctx))
    return found


class Runner:
    """`agents.Runner` for a Tether tool that runs an SDK agent itself: the same calls with
    the step's `ctx`, each model call and function tool call a durable unit of the step.

    ```python
    @app.tool
    async def triage(ctx: StepContext, text: str) -> str:
        result = await Runner.run(triage_agent, text, ctx=ctx)
        return str(result.final_output)
    ```
    """

    @staticmethod
    async def run(
        starting_agent: Agent[Any],
        input: Any,
        *,
        ctx: StepContext,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        scope = _step_scope(ctx)
        config = _config(run_config)
        token = _scope.current.set(scope)
        try:
            return await agents.Runner.run(
                durable(starting_agent), input, run_config=config, **kwargs
            )
        except BaseException:
            assert scope.journal is not None  # a step's own
            await scope.journal.failed()
            raise
        finally:
            _scope.current.reset(token)

    @staticmethod
    def run_streamed(
        starting_agent: Agent[Any],
        input: Any,
        *,
        ctx: StepContext,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResultStreaming:
        """As `agents.Runner.run_streamed`; text deltas reach the task's token stream while
        the model writes, and the caller's events get each response whole."""
        scope = _step_scope(ctx)
        token = _scope.current.set(scope)  # the run's task copies it as it starts
        try:
            return agents.Runner.run_streamed(
                durable(starting_agent), input, run_config=_config(run_config), **kwargs
            )
        finally:
            _scope.current.reset(token)


def _config(base: RunConfig | None) -> RunConfig:
    return run_config(base or RunConfig(tracing_disabled=True))
