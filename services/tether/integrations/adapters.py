"""A foreign agent as a Tether tool: its task input, its waits for a person, its journal.

The tool takes what Tether's own agents take (`client.submit_agent`, `tether submit
--agent`, the API and the MCP gateway send it: a question or messages, instructions,
model settings, budgets), so every door works unchanged. A run that needs a person
(`Journal.wait`) ends its step with two more: one that asks (`NeedsInput`: the task is
`waiting`, holding no worker) and one that journals the answer and runs the agent again,
replaying every unit that finished.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from tether.errors import DefinitionError, TerminalError
from tether.integrations.journal import Journal, WaitForInput
from tether.integrations.registry import framework_of
from tether.schemas.plans import StepSpec
from tether.tools.context import StepContext
from tether.tools.results import NeedsInput, NextSteps
from tether.tools.retry import RetryPolicy
from tether.tools.tool import Tool

RETRY = RetryPolicy(max_attempts=8, initial_backoff=1, max_backoff=60)
"""As Tether's own agents: rate limits and overloaded providers pass."""


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    prompt: str
    schema: dict[str, Any] = msgspec.field(default_factory=dict)


class Resume(msgspec.Struct, frozen=True, kw_only=True):
    """The run continues: the answer to its wait `unit` (named `name`) is the output of
    the step before this one; the journal is that of step `step`."""

    step: int
    unit: int
    name: str


class RunInput(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A foreign agent's step input: a run's (as for Tether's own agents) and the roles
    of the steps a wait adds."""

    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    settings: dict[str, Any] | None = None
    token_budget: int | None = None
    cost_budget: float | None = None
    ask: Ask | None = None
    resume: Resume | None = None


RunAgent = Callable[[StepContext, RunInput, Journal], Awaitable[Any]]
"""Runs the framework's agent once with `RunInput`, its calls through the `Journal`."""


def run_input(data: Any) -> RunInput:
    if isinstance(data, str):
        return RunInput(input=data)
    try:
        return msgspec.convert(data or {}, RunInput)
    except msgspec.ValidationError as exc:
        raise TerminalError(f"not an agent run's input: {exc}") from exc


@dataclass(frozen=True)
class ForeignRun:
    """The tool function of a foreign agent named `name`."""

    name: str
    run: RunAgent

    async def __call__(self, ctx: StepContext, data: Any) -> Any:
        step = run_input(data)
        if step.ask is not None:
            return NeedsInput(prompt=step.ask.prompt, schema=step.ask.schema)
        journal = Journal(ctx, None if step.resume is None else step.resume.step)
        if step.resume is not None:
            answer = await ctx.output(ctx.step - 1)
            await journal.answer(step.resume.unit, step.resume.name, answer)
        try:
            return await self.run(ctx, step, journal)
        except WaitForInput as wait:
            return self._ask(step, journal, wait)
        except BaseException:
            await journal.failed()
            raise

    def _ask(self, step: RunInput, journal: Journal, wait: WaitForInput) -> NextSteps:
        asking = msgspec.to_builtins(Ask(prompt=wait.prompt, schema=wait.schema))
        resume = Resume(step=journal.step, unit=wait.unit, name=wait.name)
        again = msgspec.to_builtins(msgspec.structs.replace(step, resume=resume))
        steps = [
            StepSpec(tool=self.name, input={"ask": asking}),
            StepSpec(tool=self.name, input=again),
        ]
        return NextSteps(steps=steps, output={"waiting": wait.prompt})


def foreign_tool(
    name: str,
    run: RunAgent,
    *,
    description: str,
    output_schema: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    calls: tuple[str, ...] = (),
    close: Callable[[], Awaitable[None]] | None = None,
) -> Tool:
    """A foreign agent as the tool `name`, taking a run's input as Tether's agents do;
    `close` is called when a worker that served it stops."""
    from tether.agents.agent import agent_input_schema  # the schema Tether's agents take

    return Tool(
        name=name,
        function=ForeignRun(name, run),
        description=description,
        retry=retry or RETRY,
        schema=agent_input_schema(None, None),
        output_schema=output_schema,
        agent=True,
        calls=calls,
        close=close,
    )


def adapt(source: Any) -> Tool:
    """The tool for an agent of another framework (`App.add`), or a DefinitionError that
    says what `App.add` takes."""
    module = framework_of(source)
    if module is None:
        raise DefinitionError(
            "App.add takes a Tool, a Tether Agent, a Pydantic AI Agent, an OpenAI Agents SDK "
            f"Agent or a compiled LangGraph graph, not {type(source).__name__} (from "
            f"{type(source).__module__}): register a function with @app.tool"
        )
    tool: Tool = importlib.import_module(module).as_tool(source)
    return tool
