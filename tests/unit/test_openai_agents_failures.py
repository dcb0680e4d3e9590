"""An Agents SDK run's errors, as its step takes them: at once, expected, or retried."""

from __future__ import annotations

import httpx
import openai
from agents.exceptions import MaxTurnsExceeded, UserError

from tether.errors import TerminalError
from tether.integrations.openai_agents._failures import step_error


def _status(code: int) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://model/v1/responses")
    response = httpx.Response(code, request=request)
    return openai.APIStatusError(f"status {code}", response=response, body=None)


def test_a_missing_api_key_fails_the_task_at_once_saying_so() -> None:
    error = step_error("helper", openai.OpenAIError("The api_key client option must be set"))

    assert isinstance(error, TerminalError)
    assert "api_key" in str(error) and "'helper'" in str(error)


def test_a_refused_request_fails_at_once_and_a_passing_status_is_retried() -> None:
    assert isinstance(step_error("helper", _status(400)), TerminalError)
    assert isinstance(step_error("helper", _status(401)), TerminalError)
    for passing in (408, 429, 500, 503):
        assert step_error("helper", _status(passing)) is None, passing


def test_agent_mistakes_fail_at_once_and_other_errors_keep_the_retry_policy() -> None:
    assert isinstance(step_error("helper", UserError("no model")), TerminalError)
    assert "max_turns" in str(step_error("helper", MaxTurnsExceeded("Max turns (3) exceeded")))
    assert (
        step_error("helper", openai.APIConnectionError(request=httpx.Request("GET", "http://m")))
        is None
    )
    assert step_error("helper", RuntimeError("stream cut")) is None
