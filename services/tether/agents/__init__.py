"""Durable agents: an LLM tool-calling loop on the step engine (`App.agent`)."""

from tether.agents.agent import Agent, MaxTurnsExceeded, TokenBudgetExceeded
from tether.agents.models import (
    ContextLengthExceeded,
    ModelAuthError,
    ModelRequestError,
    OpenAIModel,
)

__all__ = [
    "Agent",
    "ContextLengthExceeded",
    "MaxTurnsExceeded",
    "ModelAuthError",
    "ModelRequestError",
    "OpenAIModel",
    "TokenBudgetExceeded",
]
