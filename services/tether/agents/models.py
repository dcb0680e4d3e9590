"""Calling a model through the official `openai` client: streamed Chat Completions with
tools, and its errors mapped onto Tether's retry families in one place.

Any OpenAI-compatible endpoint works (OpenAI, Azure, vLLM, Ollama, LM Studio, ...).
The client's own retries are off: a retried LLM call is a retried durable step, with
the provider's `Retry-After` when it sends one.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from tether.errors import RetryableError, TerminalError
from tether.schemas.tasks import Usage

OnDelta = Callable[[str], Awaitable[None]]


class ModelAuthError(TerminalError):
    """The endpoint refused the API key."""


class ContextLengthExceeded(TerminalError):
    """The conversation no longer fits the model's context window."""


class ModelRequestError(TerminalError):
    """The endpoint rejected the request (unknown model, bad parameter, ...)."""


class ModelOutputTruncated(TerminalError):
    """The model stopped at its output token limit (`finish_reason: length`): a cut-off
    answer or cut-off tool arguments are never stored as if they were whole."""


class ModelContentFiltered(TerminalError):
    """The endpoint's content filter stopped the answer (`finish_reason: content_filter`)."""


@dataclass(frozen=True, eq=False)  # by identity: `settings` is a dict
class OpenAIModel:
    """A model behind an OpenAI-compatible endpoint.

    `base_url` and `api_key` default to `OPENAI_BASE_URL` and `OPENAI_API_KEY` (as the
    `openai` client reads them). `max_concurrency`: LLM calls of this model in flight
    across every worker (each agent's tool consumer's max-ack-pending), so a fleet
    respects the provider's rate limit. `settings` go to every request
    (`temperature`, `max_completion_tokens`, ...).
    """

    name: str
    base_url: str | None = None
    api_key: str | None = None
    max_concurrency: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 600.0

    def client(self) -> openai.AsyncOpenAI:
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
) -> Reply:
    """One streamed LLM call; each piece of text goes to `on_delta` as it arrives."""
    options: dict[str, Any] = {**model.settings}
    if tools:
        options["tools"] = list(tools)
    reply = _Accumulated(model.name)
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
    return checked(reply.result(), model)


def checked(reply: Reply, model: OpenAIModel) -> Reply:
    """The reply, if the model finished it: a stream that ended without a finish_reason
    was cut off on the way (a call to send again), one cut at the token limit or by a
    filter is not an answer."""
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
            f"{where} stopped at its output token limit (finish_reason 'length') in {what}: "
            "raise max_completion_tokens (OpenAIModel(settings={'max_completion_tokens': "
            "...})) or ask for a shorter answer, then retry the task"
        )
    if reply.finish_reason == "content_filter":
        raise ModelContentFiltered(
            f"{where} stopped its answer with its content filter (finish_reason "
            "'content_filter'): the conversation needs changing, retrying sends it again"
        )
    return reply


class _Accumulated:
    """A streamed reply put back together: text, tool calls by index, usage."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.content: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self._open: dict[int, dict[str, Any]] = {}
        """The call each stream index adds to now."""
        self.usage = Usage(requests=1, model=model)
        self.finish_reason: str | None = None

    def add(self, chunk: Any) -> str:
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
                cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
                requests=1,
                model=self.model,
            )
        text = ""
        for choice in chunk.choices:
            self.finish_reason = choice.finish_reason or self.finish_reason
            delta = choice.delta
            if delta.content:
                text += delta.content
            for call in delta.tool_calls or []:
                self._add_call(call)
        self.content.append(text)
        return text

    def _add_call(self, call: Any) -> None:
        entry = self._open.get(call.index)
        if entry is None or (call.id and entry["id"] and call.id != entry["id"]):
            # A new call (some servers reuse an index for the next call, with a new id).
            entry = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            self._open[call.index] = entry
            self.calls.append(entry)
        if call.id:
            entry["id"] = call.id
        if call.function is not None:
            if call.function.name:
                entry["function"]["name"] += call.function.name
            if call.function.arguments:
                entry["function"]["arguments"] += call.function.arguments

    def result(self) -> Reply:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = unique_ids(self.calls)
        return Reply(message=message, usage=self.usage, finish_reason=self.finish_reason)


def unique_ids(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls, each with an id no other has: an empty or repeated id (some compatible
    servers send them) is replaced by `tether_call_<i>`. The message is stored with these
    ids, so the model hears each call's own result under the id it is shown."""
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if not call["id"] or call["id"] in seen:
            call["id"] = f"tether_call_{i}"
        seen.add(call["id"])
    return calls


def _where(model: OpenAIModel) -> str:
    return f"model {model.name!r} at {model.base_url or 'the OpenAI API'}"


@contextlib.contextmanager
def model_errors(model: OpenAIModel) -> Iterator[None]:
    """The `openai` client's errors as Tether's: retry what may pass, fail what won't."""
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
        if exc.code == "context_length_exceeded" or "context length" in str(exc.message).lower():
            raise ContextLengthExceeded(
                f"the conversation no longer fits the context window of {where}: lower "
                "max_turns, make tools return less, or use a model with a longer context"
            ) from exc
        raise ModelRequestError(f"{where} rejected the request: {exc.message}") from exc
    except openai.NotFoundError as exc:
        raise ModelRequestError(
            f"{where} was not found ({exc.status_code}): check the model name and base_url"
        ) from exc
    except openai.APIStatusError as exc:
        if exc.status_code == 429 or exc.status_code >= 500 or exc.status_code in (408, 409):
            raise RetryableError(
                f"{where} answered {exc.status_code}: {exc.message}",
                retry_after=retry_after(exc.response.headers),
            ) from exc
        raise ModelRequestError(f"{where} answered {exc.status_code}: {exc.message}") from exc
    except openai.APIError as exc:  # connection lost, timed out
        raise RetryableError(f"lost {where}: {exc}") from exc
    # Anything else (the transport's own error when a stream is cut off) is retried with
    # the step's backoff, as every unexpected exception is.


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
