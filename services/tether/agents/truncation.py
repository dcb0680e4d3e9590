"""Which token limit stopped a model's answer (`finish_reason: length`), and how to raise
it: the limit the call sent, or, when it sent none, the server's own (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""The request options that bound an answer's length, as an endpoint may name them."""
BUDGET_CAP = "_tether_budget_cap"
"""Set in a call's options when the task's budget lowered its answer cap below what it
asked (`answer_caps.capped`), so an answer cut there is told as the budget's doing;
removed before the call is sent."""
RETRY = (
    "then retry the task: 'tether dlq retry ID' (its turns so far are kept), or the Retry "
    "button on its dashboard page"
)
"""How a task a limit stopped runs on once the limit is raised."""


def sent_options(extra: Mapping[str, Any]) -> dict[str, Any]:
    """A call's options as sent: without Tether's own note of a budget cap."""
    return {name: value for name, value in extra.items() if name != BUDGET_CAP}


def limit_advice(settings: Mapping[str, Any], extra: Mapping[str, Any]) -> str:
    """What stopped the answer and the fix. `settings`: the model's own
    (`OpenAIModel(settings=...)`); `extra`: this call's (the run's `model_settings`, and
    the budget's cap)."""
    budget_cap = extra.get(BUDGET_CAP)
    if budget_cap is not None:
        named = next((n for n in LIMITS if extra.get(n) == budget_cap), "max_tokens")
        return (
            f"the task's token budget had room for {budget_cap:,} answer tokens, so the "
            f"call was sent {named}={budget_cap}, which stopped it: raise the budget "
            "(`tether update-agent TASK --budget N`, or answer the task's budget question "
            f'with {{"tokens": N}}), or ask for a shorter answer, {RETRY}'
        )
    for name in LIMITS:
        if extra.get(name) is not None:
            return (
                f"the call's {name}={extra[name]} (from the run's model_settings) stopped it: "
                f"raise {name} in model_settings, or ask for a shorter answer, {RETRY}"
            )
        if settings.get(name) is not None:
            return (
                f"the call's {name}={settings[name]} (from OpenAIModel(settings=...)) "
                f"stopped it: raise {name} there, or ask for a shorter answer, {RETRY}"
            )
    return (
        "the call set no token limit, so the server's own limit stopped it (for llama.cpp, "
        "its context per slot: --ctx-size/-c, n_ctx, shared by --parallel slots): give the "
        "server a larger context, or set max_tokens (OpenAIModel(settings={'max_tokens': "
        f"N}}) or the run's model_settings) and ask for a shorter answer, {RETRY}"
    )
