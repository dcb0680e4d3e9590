"""An agent's (and a run config's) input and output guardrails as durable units: each
check's verdict is journaled, so a replay gets it back without running the check again
(a guardrail may call a model). They run beside the model call (the SDK starts input
guardrails with it), so each is keyed by its name and turn, not by a place
(`Journal.beside`). A verdict read back carries its `output_info` as JSON."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agents import GuardrailFunctionOutput, InputGuardrail, OutputGuardrail

from tether.integrations.openai_agents import _scope

G = TypeVar("G", InputGuardrail[Any], OutputGuardrail[Any])
DURABLE = "_tether_durable"


def durable_guardrails(guardrails: Sequence[G] | None, kind: str) -> list[G]:
    """`guardrails` (`kind`: input or output) as copies whose checks are units."""
    return [_guardrail(g, kind) for g in guardrails or ()]


def _guardrail(guardrail: G, kind: str) -> G:
    if getattr(guardrail.guardrail_function, DURABLE, False):
        return guardrail
    check: Callable[..., Any] = guardrail.guardrail_function
    name = guardrail.get_name()

    async def guardrail_function(context: Any, agent: Any, data: Any) -> Any:
        scope = _scope.current.get()
        if scope is None or scope.journal is None:
            return await _run(check, context, agent, data)

        async def body() -> dict[str, Any]:
            # what the check itself runs (a model, an agent) is no unit: it runs beside
            # the sequence, so its units would take places a replay does not take
            token = _scope.current.set(dataclasses.replace(scope, journal=None))
            try:
                verdict = await _run(check, context, agent, data)
            finally:
                _scope.current.reset(token)
            return {
                "output_info": _scope.as_json(verdict.output_info),
                "tripwire_triggered": verdict.tripwire_triggered,
            }

        stored = await scope.journal.beside(f"guardrail.{kind}.{name}", body)
        return GuardrailFunctionOutput(
            output_info=stored["output_info"], tripwire_triggered=stored["tripwire_triggered"]
        )

    setattr(guardrail_function, DURABLE, True)
    return dataclasses.replace(guardrail, guardrail_function=guardrail_function, name=name)


async def _run(check: Callable[..., Any], *args: Any) -> Any:
    verdict = check(*args)
    return await verdict if inspect.isawaitable(verdict) else verdict
