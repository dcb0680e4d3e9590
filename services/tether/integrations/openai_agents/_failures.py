"""What an Agents SDK run's error means for its step (pure): a mistake in the agent, a
missing API key or a request the provider refuses fails the task at once, a guardrail's
tripwire is an expected outcome, a provider it cannot reach is retried (said with its
URL), and anything else (rate limits, an overloaded provider) keeps the step's retry
policy."""

from __future__ import annotations

import openai
from agents.exceptions import (
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    OutputGuardrailTripwireTriggered,
    UserError,
)

from tether.errors import GuardrailTripped, StepError, TerminalError
from tether.integrations.failures import no_responses_api, unreachable

PASSING = frozenset({408, 409, 429})
"""HTTP statuses below 500 that pass: timeouts, conflicts, rate limits."""


def step_error(agent: str, error: Exception) -> StepError | None:
    """The Tether error `error` becomes, or None to raise it as it is."""
    if (away := unreachable(agent, error)) is not None:
        return away
    if isinstance(error, InputGuardrailTripwireTriggered | OutputGuardrailTripwireTriggered):
        said = error.guardrail_result.guardrail.get_name()
        return GuardrailTripped(f"agent {agent!r}: the guardrail {said!r} tripped")
    if isinstance(error, MaxTurnsExceeded):
        return TerminalError(f"agent {agent!r}: {error} (raise max_turns, or simplify the task)")
    if isinstance(error, UserError):
        return TerminalError(f"agent {agent!r} is misconfigured for the Agents SDK: {error}")
    if isinstance(error, openai.APIStatusError):
        if error.status_code >= 500 or error.status_code in PASSING:
            return None
        hint = ""
        if no_responses_api(error):
            hint = (
                ". The server has no Responses API, the SDK's default: call "
                'agents.set_default_openai_api("chat_completions") where the app is defined'
            )
        return TerminalError(
            f"agent {agent!r}: the model refused the request ({error.status_code}): "
            f"{error.message}{hint}"
        )
    if isinstance(error, openai.OpenAIError) and not isinstance(error, openai.APIError):
        return TerminalError(  # the client could not be made: no key, a bad option
            f"agent {agent!r}: the OpenAI client could not be set up: {error}"
        )
    return None
