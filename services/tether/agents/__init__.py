"""Durable agents: an LLM tool-calling loop on the step engine (`App.agent`)."""

from tether.agents.agent import Agent, MaxTurnsExceeded, TokenBudgetExceeded
from tether.agents.budget import PRICES, BudgetExceeded, Price
from tether.agents.models import (
    ContextLengthExceeded,
    ModelAuthError,
    ModelRequestError,
    OpenAIModel,
)

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
