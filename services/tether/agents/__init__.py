"""Durable agents: an LLM tool-calling loop on the step engine (`app.add(Agent(...))`).

Names load on first use: the CLI reads agent steps (`agents.conversation`) without
paying for the `openai` client, which takes a second to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.agents.budget import PRICES, Price
    from tether.agents.errors import (
        BudgetExceeded,
        ContextLengthExceeded,
        MaxTurnsExceeded,
        ModelAuthError,
        ModelRequestError,
        TokenBudgetExceeded,
    )
    from tether.agents.models import OpenAIModel

_HOMES = {
    "tether.agents.agent": ["Agent"],
    "tether.agents.budget": ["PRICES", "Price"],
    "tether.agents.errors": [
        "BudgetExceeded",
        "ContextLengthExceeded",
        "MaxTurnsExceeded",
        "ModelAuthError",
        "ModelRequestError",
        "TokenBudgetExceeded",
    ],
    "tether.agents.models": ["OpenAIModel"],
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
