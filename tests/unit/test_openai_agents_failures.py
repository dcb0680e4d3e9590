"""An Agents SDK run's errors, as its step takes them: at once, expected, or retried."""

from __future__ import annotations

import httpx
import openai
import pytest
from agents.exceptions import MaxTurnsExceeded, UserError

from tether.errors import RetryableError, TerminalError
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
    away = step_error("helper", openai.APIConnectionError(request=httpx.Request("GET", "http://m")))
    assert isinstance(away, RetryableError) and str(away).startswith("could not connect to http")
    assert step_error("helper", RuntimeError("stream cut")) is None


def test_a_model_it_cannot_reach_is_named_with_where_its_url_was_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def away(url: str) -> str:
        error = openai.APIConnectionError(request=httpx.Request("POST", url))
        return str(step_error("helper", error))

    monkeypatch.setenv("OPENAI_BASE_URL", "http://local:8000/v1/")
    assert away("http://local:8000/v1/chat/completions").startswith(
        "could not connect to http://local:8000/v1: "
    )
    assert "the URL is from OPENAI_BASE_URL" in away("http://local:8000/v1/responses")
    assert "from the agent's model" in away("http://elsewhere/v1/responses")
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert "the default: set OPENAI_BASE_URL" in away("https://api.openai.com/v1/responses")


def test_a_404_to_the_responses_api_says_how_to_call_chat_completions() -> None:
    said = str(step_error("helper", _status(404)))

    assert 'set_default_openai_api("chat_completions")' in said
