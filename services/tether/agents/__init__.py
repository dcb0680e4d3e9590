"""Durable agents: an LLM tool-calling loop on the step engine (`App.agent`).

Names load on first use: the CLI reads agent steps (`agents.conversation`) without
paying for the `openai` client, which takes a second to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.agents.agent import Agent, MaxTurnsExceeded, TokenBudgetExceeded
    from tether.agents.budget import PRICES, BudgetExceeded, Price
    from tether.agents.models import (
        ContextLengthExceeded,
        ModelAuthError,
        ModelRequestError,
        OpenAIModel,
    )

_HOMES = {
    "tether.agents.agent": ["Agent", "MaxTurnsExceeded", "TokenBudgetExceeded"],
    "tether.agents.budget": ["PRICES", "BudgetExceeded", "Price"],
    "tether.agents.models": [
        "ContextLengthExceeded",
        "ModelAuthError",
        "ModelRequestError",
        "OpenAIModel",
    ],
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "PRICES",
    "Agent",
    "BudgetExceeded",
    "ContextLengthExceeded",
    "MaxTurnsExceeded",
    "ModelAuthError",
    "ModelRequestError",
    "OpenAIModel",
    "Price",
    "TokenBudgetExceeded",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'tether.agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
