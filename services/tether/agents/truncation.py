"""Which token limit stopped a model's answer (`finish_reason: length`), and how to raise
it: the limit the call sent, or, when it sent none, the server's own (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""The request options that bound an answer's length, as an endpoint may name them."""


def limit_advice(settings: Mapping[str, Any], extra: Mapping[str, Any]) -> str:
    """What stopped the answer and the fix. `settings`: the model's own
    (`OpenAIModel(settings=...)`); `extra`: this call's (the run's `model_settings`)."""
    for name in LIMITS:
        if extra.get(name) is not None:
            return (
                f"the call's {name}={extra[name]} (from the run's model_settings) stopped it: "
                f"raise {name} in model_settings, or ask for a shorter answer, then retry "
                "the task"
            )
        if settings.get(name) is not None:
            return (
                f"the call's {name}={settings[name]} (from OpenAIModel(settings=...)) "
                f"stopped it: raise {name} there, or ask for a shorter answer, then retry "
                "the task"
            )
    return (
        "the call set no token limit, so the server's own limit stopped it (for llama.cpp, "
        "its context per slot: --ctx-size/-c, n_ctx, shared by --parallel slots): give the "
        "server a larger context, or set max_tokens (OpenAIModel(settings={'max_tokens': "
        "N}) or the run's model_settings) and ask for a shorter answer, then retry the task"
    )
