"""A foreign agent's model errors, said as Tether's own agents say them (pure): a model
it cannot reach names its URL and where that URL came from (the frameworks' `openai`
clients raise a bare "Connection error.", and a traceback of their frames), and a 404
to the Responses API says that the server speaks only Chat Completions."""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from tether.agents.errors import ModelUnreachable

if TYPE_CHECKING:
    import openai

DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENDPOINTS = ("/chat/completions", "/responses")
"""The paths the frameworks call under a base URL."""


def unreachable(agent: str, error: BaseException) -> ModelUnreachable | None:
    """The step's error when `error` (or what it wraps) is a connection the model's
    client could not make or lost, else None."""
    cause = connection_error(error)
    if cause is None:
        return None
    url, source = endpoint(str(cause.request.url))
    timed_out = type(cause).__name__ == "APITimeoutError"
    what = "timed out calling" if timed_out else "could not connect to"
    return ModelUnreachable(
        f"{what} {url}: {cause.__cause__ or cause} (agent {agent!r}; the URL is from "
        f"{source}): is the server up?"
    )


def connection_error(error: BaseException) -> openai.APIConnectionError | None:
    """The `openai` client's connection error in `error`'s chain (a framework wraps it)."""
    if (client := _openai()) is None:
        return None
    found = in_chain(error, client.APIConnectionError)
    return found if isinstance(found, client.APIConnectionError) else None


def _openai() -> ModuleType | None:
    """The `openai` package once something loaded it (none of its errors exist before):
    importing it here would cost every worker's start ~0.6 s for nothing."""
    return sys.modules.get("openai")


def endpoint(called: str) -> tuple[str, str]:
    """The base URL a request to `called` went to, and where that URL was set."""
    base = next((called.removesuffix(p) for p in ENDPOINTS if called.endswith(p)), called)
    env = os.environ.get("OPENAI_BASE_URL", "").rstrip("/")
    if env and base.rstrip("/") == env:
        return base, "OPENAI_BASE_URL"
    if base.rstrip("/") == DEFAULT_BASE_URL:
        return base, "the default: set OPENAI_BASE_URL, or give the model's provider a base_url"
    return base, "the agent's model (its provider's or client's base_url)"


def no_responses_api(error: BaseException) -> bool:
    """Whether `error` is a 404 to a Responses API call: the server speaks only Chat
    Completions (llama.cpp, vLLM, most local servers), which the framework can call."""
    if (client := _openai()) is None:
        return False
    found = in_chain(error, client.APIStatusError)
    if not isinstance(found, client.APIStatusError):
        return False
    return bool(found.status_code == 404 and found.request.url.path.endswith("/responses"))


def in_chain(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first `kind` in `error`'s chain of causes (a framework wraps the client's)."""
    seen: BaseException | None = error
    for _ in range(8):  # a chain, not a cycle
        if seen is None or isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
