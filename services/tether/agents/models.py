"""Calling a model through the official `openai` client: streamed Chat Completions with
tools, and its errors mapped onto Tether's retry families in one place.

Any OpenAI-compatible endpoint works (OpenAI, Azure, vLLM, Ollama, LM Studio, ...).
The client's own retries are off: a retried LLM call is a retried durable step, with
the provider's `Retry-After` when it sends one.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from tether.agents import chat, responses
from tether.agents.budget import Price
from tether.agents.errors import ContextLengthExceeded as ContextLengthExceeded
from tether.agents.errors import ModelAuthError as ModelAuthError
from tether.agents.errors import ModelContentFiltered as ModelContentFiltered
from tether.agents.errors import ModelOutputTruncated as ModelOutputTruncated
from tether.agents.errors import ModelQuotaExceeded as ModelQuotaExceeded
from tether.agents.errors import ModelRequestError as ModelRequestError
from tether.agents.errors import ModelUnreachable as ModelUnreachable
from tether.agents.errors import RateLimited as RateLimited
from tether.agents.errors import StructuredOutputsRefused as StructuredOutputsRefused
from tether.agents.truncation import RETRY, limit_advice, sent_options
from tether.errors import RetryableError, TerminalError
from tether.schemas.records import Usage

if TYPE_CHECKING:  # the package loads at the first call: a worker starts ~0.6 s sooner
    import openai

OnDelta = Callable[[str], Awaitable[None]]
OnWait = Callable[[str], Awaitable[None]]
RATE_LIMIT_BACKOFF = (1.0, 60.0)
"""First and longest wait between calls a provider rate-limits (a `Retry-After` it sends
is honoured up to the longest)."""


@dataclass(frozen=True, eq=False)  # by identity: `settings` is a dict
class OpenAIModel:
    """A model behind an OpenAI-compatible endpoint.

    `base_url` and `api_key` default to `OPENAI_BASE_URL` and `OPENAI_API_KEY` (as the
    `openai` client reads them). `max_concurrency`: LLM calls in flight across every
    worker *per agent* that uses this model (it is that agent's tool consumer's
    max-ack-pending): two agents on one model may have twice as many. `settings` go to
    every request (`temperature`, `max_completion_tokens`, ...). `max_rate_limit_wait`:
    how long one call waits out rate limits (429) in place before its step counts a
    failed attempt; the step's timeout and the task's deadline bound it too.
    """

    name: str
    base_url: str | None = None
    api_key: str | None = None
    max_concurrency: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 600.0
    max_rate_limit_wait: timedelta = timedelta(minutes=30)
    structured_outputs: bool | None = None
    """How an agent with an `output_type` asks for its answer: True, `response_format`
    `json_schema`; False, a final-answer tool call; None, the first, and the second from
    the first time the endpoint refuses it."""
    price: Price | None = None
    """Dollars per million tokens, for a cost budget (None: `agents.budget.PRICES`)."""
    api: Literal["chat", "responses"] = "chat"
    """`responses`: call OpenAI's Responses API (`client.responses`) instead of Chat
    Completions, which every other OpenAI-compatible server speaks."""
    base_url_from: str | None = None
    """Where `base_url` was set, as a connection error names it (default
    `OpenAIModel(base_url=...)`): a program that takes it from its own option says so."""

    def client(self) -> openai.AsyncOpenAI:
        import openai  # here: see the TYPE_CHECKING import

        key = self.api_key or os.environ.get("OPENAI_API_KEY") or "unset"
        return openai.AsyncOpenAI(
            base_url=self.base_url, api_key=key, max_retries=0, timeout=self.timeout
        )


@dataclass(frozen=True)
class Reply:
    message: dict[str, Any]
    """The assistant message, as it goes back into the conversation."""
    usage: Usage
    finish_reason: str | None


async def complete(
    client: openai.AsyncOpenAI,
    model: OpenAIModel,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    on_delta: OnDelta,
    on_wait: OnWait | None = None,
    options: Mapping[str, Any] | None = None,
) -> Reply:
    """One streamed LLM call; each piece of text goes to `on_delta` as it arrives.

    A rate limit (429) is waited out here, with the provider's `Retry-After` or a capped
    backoff, and told to `on_wait`: a busy provider does not spend the step's attempts.
    Past `model.max_rate_limit_wait` it is an attempt's failure like any other.
    """
    waited, wait = 0.0, RATE_LIMIT_BACKOFF[0]
    while True:
        try:
            return await _complete_once(client, model, messages, tools, on_delta, options)
        except RateLimited as exc:
            asked = exc.retry_after.total_seconds() if exc.retry_after is not None else wait
            pause = min(asked, RATE_LIMIT_BACKOFF[1])
            if waited + pause > model.max_rate_limit_wait.total_seconds():
                raise
            if on_wait is not None:
                await on_wait(f"{exc}: waiting {pause:.0f} s, then calling again")
            await asyncio.sleep(pause)
            waited += pause
            wait = min(wait * 2, RATE_LIMIT_BACKOFF[1])


async def _complete_once(
    client: openai.AsyncOpenAI,
    model: OpenAIModel,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    on_delta: OnDelta,
    extra: Mapping[str, Any] | None,
) -> Reply:
    options: dict[str, Any] = {**model.settings, **sent_options(extra or {})}
    if model.api == "responses":
        return await _respond_once(client, model, messages, tools, on_delta, options, extra)
    if tools:
        options["tools"] = list(tools)
    reply = chat.Accumulated(model.name)
    with model_errors(model):
        create: Any = client.chat.completions.create  # messages are plain dicts here
        stream = await create(
            model=model.name,
            messages=list(messages),
            stream=True,
            stream_options={"include_usage": True},
            **options,
        )
        async with stream:
            async for chunk in stream:
                text = reply.add(chunk)
                if text:
                    await on_delta(text)
                # A fast model's chunks arrive many to a read, and parsing them never waits:
                # without this, one stream holds the event loop for a whole read, and the
                # worker's beat starves behind a few busy streams (taken for dead).
                await asyncio.sleep(0)
    return checked(Reply(reply.message(), reply.usage, reply.finish_reason), model, extra)


async def _respond_once(
    client: openai.AsyncOpenAI,
    model: OpenAIModel,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    on_delta: OnDelta,
    options: dict[str, Any],
    extra: Mapping[str, Any] | None,
) -> Reply:
    """One streamed call of the Responses API, as a chat reply (see `agents.responses`)."""
    body = responses.request(list(messages), list(tools), options)
    reply = responses.Accumulated(model.name)
    with model_errors(model):
        create: Any = client.responses.create
        stream = await create(model=model.name, stream=True, **body)
        async with stream:
            async for event in stream:
                text = reply.add(event)
                if text:
                    await on_delta(text)
                await asyncio.sleep(0)  # as for a chat stream: let the worker's beat in
    return checked(Reply(reply.message(), reply.usage, reply.finish_reason), model, extra)


def checked(reply: Reply, model: OpenAIModel, extra: Mapping[str, Any] | None = None) -> Reply:
    """The reply, if the model finished it: a stream that ended without a finish_reason
    was cut off on the way (a call to send again), one cut at the token limit or by a
    filter is not an answer (`extra`: the call's options, to name the limit it sent)."""
    where = _where(model)
    text = reply.message.get("content") or ""
    calls = reply.message.get("tool_calls") or []
    if reply.finish_reason is None:
        raise RetryableError(
            f"{where} ended its answer without a finish_reason after {len(text)} characters "
            f"and {len(calls)} tool call(s): the stream was cut off, so the call is sent again"
        )
    if reply.finish_reason == "length":
        what = f"its answer after {len(text)} characters"
        if calls:
            what = f"the arguments of tool call {calls[-1]['function']['name']!r}"
        raise ModelOutputTruncated(
            f"{where} stopped at a token limit (finish_reason 'length') in {what}: "
            + limit_advice(model.settings, extra or {})
        )
    if reply.finish_reason == "content_filter":
        raise ModelContentFiltered(
            f"{where} stopped its answer with its content filter (finish_reason "
            "'content_filter'): the conversation needs changing, retrying sends it again"
        )
    if not text and not calls:
        raise RetryableError(
            f"{where} answered with nothing (no text, no tool call; finish_reason "
            f"{reply.finish_reason!r}): the call is sent again"
        )
    return reply


DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _endpoint(model: OpenAIModel) -> tuple[str, str]:
    """The URL the model is called at, and where that URL was set."""
    if model.base_url:
        return model.base_url, model.base_url_from or "OpenAIModel(base_url=...)"
    if env := os.environ.get("OPENAI_BASE_URL"):
        return env, "OPENAI_BASE_URL"
    return DEFAULT_BASE_URL, "the default: set OPENAI_BASE_URL or OpenAIModel(base_url=...)"


def _where(model: OpenAIModel) -> str:
    return f"model {model.name!r} at {_endpoint(model)[0]}"


@contextlib.contextmanager
def model_errors(model: OpenAIModel) -> Iterator[None]:
    """The `openai` client's errors as Tether's: retry what may pass, fail what won't."""
    import openai  # loaded already: its client made the call

    where = _where(model)
    try:
        yield
    except openai.AuthenticationError as exc:
        raise ModelAuthError(
            f"{where} refused the API key ({exc.status_code}): set OPENAI_API_KEY "
            "(or OpenAIModel(api_key=...)) to a key it accepts"
        ) from exc
    except openai.PermissionDeniedError as exc:
        raise ModelAuthError(f"{where} denied access ({exc.status_code}): {exc.message}") from exc
    except openai.BadRequestError as exc:
        raise _bad_request(exc, where) from exc
    except openai.NotFoundError as exc:
        raise ModelRequestError(
            f"{where} was not found ({exc.status_code}): check the model name and base_url"
        ) from exc
    except openai.RateLimitError as exc:
        if "insufficient_quota" in (exc.code, exc.type):
            raise ModelQuotaExceeded(
                f"{where} says the account has no quota left (429 insufficient_quota): "
                f"check the plan and billing of the API key's account, {RETRY}"
            ) from exc
        raise RateLimited(
            f"{where} is rate-limiting (429): {exc.message}",
            retry_after=retry_after(exc.response.headers),
        ) from exc
    except openai.APIStatusError as exc:
        if exc.status_code >= 500 or exc.status_code in (408, 409):
            raise RetryableError(
                f"{where} answered {exc.status_code}: {exc.message}",
                retry_after=retry_after(exc.response.headers),
            ) from exc
        raise ModelRequestError(f"{where} answered {exc.status_code}: {exc.message}") from exc
    except openai.APIConnectionError as exc:  # refused, unreachable, timed out
        url, source = _endpoint(model)
        what = (
            "timed out calling"
            if isinstance(exc, openai.APITimeoutError)
            else "could not connect to"
        )
        raise ModelUnreachable(
            f"{what} {url}: {exc.__cause__ or exc} (model {model.name!r}; the URL is from "
            f"{source}): is the server up?"
        ) from exc
    except openai.APIError as exc:  # the connection was lost on the way
        raise RetryableError(f"lost {where}: {exc}") from exc
    # Anything else (the transport's own error when a stream is cut off) is retried with
    # the step's backoff, as every unexpected exception is.


def _bad_request(exc: openai.BadRequestError, where: str) -> TerminalError:
    message = str(exc.message)
    if exc.code == "context_length_exceeded" or "context length" in message.lower():
        return ContextLengthExceeded(
            f"the conversation no longer fits the context window of {where}: lower "
            "max_turns, make tools return less, or use a model with a longer context"
        )
    if "response_format" in message or "json_schema" in message:
        return StructuredOutputsRefused(f"{where} rejected the request: {message}")
    return ModelRequestError(f"{where} rejected the request: {message}")


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The provider's wait, in seconds: `retry-after-ms`, or `retry-after` as seconds or
    an HTTP date. None when it sent neither (the step's backoff applies)."""
    if (value := headers.get("retry-after-ms")) is not None:
        with contextlib.suppress(ValueError):
            return max(0.0, float(value) / 1000)
    value = headers.get("retry-after")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None
