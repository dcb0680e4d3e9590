"""A Pydantic AI agent as a Tether tool (`app.add(agent)`), run durably in a step."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, ResolveModelId
from pydantic_ai.capabilities.abstract import leaf_capabilities
from pydantic_ai.durable_exec import BaseDurabilityCapability, external_event_scope, replay_scope
from pydantic_ai.models import Model, infer_model
from pydantic_ai.usage import UsageLimits
from pydantic_core import to_jsonable_python

from tether.errors import DefinitionError
from tether.integrations.adapters import RunInput, foreign_tool
from tether.integrations.journal import Journal
from tether.integrations.meter import Meter
from tether.integrations.pydantic_ai.approvals import (
    TetherApprovals,
    TetherWaiter,
    waits_for_answers,
)
from tether.integrations.pydantic_ai.durability import TetherDurability
from tether.integrations.pydantic_ai.failures import step_error
from tether.integrations.pydantic_ai.history import prompt_and_history
from tether.integrations.pydantic_ai.running import Running, enter
from tether.tools.context import StepContext
from tether.tools.tool import Tool

if TYPE_CHECKING:
    from pydantic_ai.settings import ModelSettings

Deps = Callable[[StepContext], Any | Awaitable[Any]]
"""Builds a run's `deps` from its step (sync or async)."""


def _leaves(agent: Agent[Any, Any]) -> list[AbstractCapability[Any]]:
    return list(leaf_capabilities(agent.root_capability))


def run_capabilities(
    agent: Agent[Any, Any], models: dict[str, Model] | None = None
) -> list[AbstractCapability[Any]]:
    """What each run adds to the user's agent (which is left unchanged): Tether's
    durability (knowing `models`) unless the agent has it, and Tether's approvals unless
    it asks for input its own way. Another engine's durability cannot be combined with
    it."""
    leaves = _leaves(agent)
    engines = [c for c in leaves if isinstance(c, BaseDurabilityCapability)]
    foreign = [c for c in engines if not isinstance(c, TetherDurability)]
    if foreign:
        raise DefinitionError(
            f"agent {agent.name!r} already runs durably on {type(foreign[0]).__name__}: remove "
            "that capability to add it to a Tether app (Tether makes its calls durable itself)"
        )
    added: list[AbstractCapability[Any]] = [] if engines else [TetherDurability(models=models)]
    if not any(waits_for_answers(c) for c in leaves):
        added.append(TetherApprovals())
    return added


def model_to_build(agent: Agent[Any, Any]) -> str | None:
    """The agent's model, when a string names it, to build once for all its runs in this
    worker: Pydantic AI's durable runs otherwise build it again for each request (a
    provider and an HTTP client each time: ~20 ms of CPU and a new connection). Not when
    a `ResolveModelId` capability builds models from a run's deps."""
    if not isinstance(agent.model, str):
        return None
    if any(isinstance(c, ResolveModelId) for c in _leaves(agent)):
        return None
    return agent.model


@dataclass
class PydanticRun:
    """Runs the agent once in a step: its calls through the step's journal."""

    agent: Agent[Any, Any]
    deps: Deps | None = None
    usage_limits: UsageLimits | None = None
    _added: list[AbstractCapability[Any]] | None = field(default=None, init=False)
    _built: AsyncExitStack = field(default_factory=AsyncExitStack, init=False)
    _building: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def _capabilities(self) -> list[AbstractCapability[Any]]:
        """Made at the first run (the model needs the worker's environment: its key),
        then the same for every run, as an agent built with them would have them."""
        if self._added is not None:  # every run but the first: no lock to take
            return self._added
        async with self._building:  # runs that start together build one model
            if self._added is None:
                models = None
                if (name := model_to_build(self.agent)) is not None:
                    models = {name: await self._built.enter_async_context(infer_model(name))}
                self._added = run_capabilities(self.agent, models)
            return self._added

    async def close(self) -> None:
        """The worker stops: close the model built for its runs (its HTTP client)."""
        self._added = None
        await self._built.aclose()

    async def __call__(self, ctx: StepContext, step: RunInput, journal: Journal) -> Any:
        deps = None if self.deps is None else self.deps(ctx)
        if isinstance(deps, Awaitable):
            deps = await deps
        prompt, history = prompt_and_history(step.input)
        leave = enter(Running(ctx, journal, await Meter.open(ctx, step)))
        try:
            with replay_scope(), external_event_scope(TetherWaiter()):
                result = await self.agent.run(
                    prompt,
                    message_history=history,
                    instructions=step.instructions,
                    model_settings=cast("ModelSettings | None", step.settings),
                    deps=deps,
                    usage_limits=self.usage_limits,
                    capabilities=await self._capabilities(),
                )
        except Exception as error:
            mapped = step_error(self.agent.name or "", error)
            if mapped is None:
                raise
            raise mapped from error
        finally:
            leave()
        return to_jsonable_python(result.output)


def output_schema(agent: Agent[Any, Any]) -> dict[str, Any] | None:
    """The JSON Schema of a typed output (None for text)."""
    kind: Any = agent.output_type
    if kind is str:
        return None
    try:
        schema: dict[str, Any] = TypeAdapter(kind).json_schema()
    except Exception:  # output functions, unions of output specs: not one plain type
        return None
    return schema


def as_tool(
    agent: Agent[Any, Any], *, deps: Deps | None = None, usage_limits: UsageLimits | None = None
) -> Tool:
    """The tool that runs `agent` durably, served as its name.

    Args:
        agent: a Pydantic AI agent with a `name`, left unchanged.
        deps: builds each run's `deps` from its `StepContext` (default: None).
        usage_limits: each run's, as `agent.run` takes them (default: Pydantic AI's, 50
            requests); Tether's budgets bound the tokens of the whole task tree too.
    """
    if not agent.name:
        raise DefinitionError(
            "a Pydantic AI agent added to a Tether app needs a name, its tool's name: "
            'Agent(..., name="helper")'
        )
    run_capabilities(agent)  # refuse another durability engine now, not at the first run
    description = agent.description if isinstance(agent.description, str) else None
    run = PydanticRun(agent, deps, usage_limits)
    return foreign_tool(
        agent.name,
        run,
        close=run.close,
        description=description or f"The Pydantic AI agent {agent.name}.",
        output_schema=output_schema(agent),
    )
