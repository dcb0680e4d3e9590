"""What a Pydantic AI run's error means for its step (pure): a mistake in the agent or a
request the provider refuses fails the task at once, a rate limit or an overloaded
provider is retried (after the provider's `Retry-After` when it says one), as is one it
cannot reach (said with its URL), and anything else keeps the step's retry policy."""

from __future__ import annotations

from pydantic_ai.exceptions import ModelHTTPError, UsageLimitExceeded, UserError

from tether.errors import RetryableError, StepError, TerminalError
from tether.integrations.failures import no_responses_api, unreachable

PASSING = frozenset({408, 409, 429})
"""HTTP statuses below 500 that pass: timeouts, conflicts, rate limits."""


def step_error(agent: str, error: Exception) -> StepError | None:
    """The Tether error `error` becomes, or None to raise it as it is."""
    if (away := unreachable(agent, error)) is not None:
        return away
    if isinstance(error, UserError):
        return TerminalError(f"agent {agent!r} is misconfigured for Pydantic AI: {error}")
    if isinstance(error, UsageLimitExceeded):
        return TerminalError(f"agent {agent!r} reached its usage limit: {error}")
    if isinstance(error, ModelHTTPError):
        if error.status_code >= 500 or error.status_code in PASSING:
            return RetryableError(str(error), retry_after=error.retry_after)
        return TerminalError(
            f"agent {agent!r}: the model {error.model_name!r} refused the request "
            f"({error.status_code}): {error.body}{_hint(error)}"
        )
    return None


def _hint(error: ModelHTTPError) -> str:
    if not no_responses_api(error):
        return ""
    return (
        f". The server has no Responses API, which 'openai:' models call: name the model "
        f"'openai-chat:{error.model_name}' to call its Chat Completions"
    )
