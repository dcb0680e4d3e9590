"""OpenAI chat-completion bodies and stream chunks for one scripted turn (no I/O here)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from tether.testing.llm.script import Turn

_WORDS = re.compile(r"\S+\s*|\s+")
_ARGUMENT_PIECE = 16
"""Longest piece of a tool call's arguments per chunk (a call's arguments take >= 2 chunks)."""


def split_words(text: str) -> list[str]:
    """Chunks at word boundaries, each keeping its trailing whitespace: they join to `text`."""
    return _WORDS.findall(text)


def split_arguments(arguments: str) -> list[str]:
    """Two or more pieces (when there are two characters to split), as OpenAI streams them."""
    size = max(1, min(_ARGUMENT_PIECE, math.ceil(len(arguments) / 2)))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """A turn made concrete for one request: its id, words, calls and token counts."""

    id: str
    model: str
    created: int
    content: str | None
    words: list[str]
    calls: list[Call]
    usage: dict[str, Any]
    scripted_finish: str | None = None
    raw_escapes: bool = False

    @property
    def finish_reason(self) -> str:
        return self.scripted_finish or ("tool_calls" if self.calls else "stop")


def usage_of(turn: Turn, messages: list[dict[str, Any]], words: int) -> dict[str, Any]:
    """The turn's scripted counts; missing ones estimated from the request and the reply."""
    scripted = turn.usage
    prompt = scripted.prompt_tokens if scripted else None
    completion = scripted.completion_tokens if scripted else None
    cached = scripted.cached_tokens if scripted else None
    if prompt is None:
        prompt = math.ceil(len(msgspec.json.encode(messages)) / 4)
    if completion is None:
        completion = words + 10 * len(turn.tool_calls)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached or 0},
    }


def make_reply(
    turn: Turn, *, k: int, attempt: int, model: str, created: int, messages: list[dict[str, Any]]
) -> Reply:
    """Ids are deterministic (`chatcmpl-<k>-<attempt>`, `call_<k>_<i>`) so tests can name them."""
    words = split_words(turn.content or "")
    calls = [
        Call(
            id=f"call_{k}_{i}" if call.id is None else call.id,
            name=call.name,
            arguments=(
                call.arguments
                if isinstance(call.arguments, str)
                else msgspec.json.encode(call.arguments).decode()
            ),
        )
        for i, call in enumerate(turn.tool_calls)
    ]
    return Reply(
        id=f"chatcmpl-{k}-{attempt}",
        model=model,
        created=created,
        content=turn.content,
        words=words,
        calls=calls,
        usage=usage_of(turn, messages, len(words)),
        scripted_finish=turn.finish_reason,
        raw_escapes=turn.raw_escapes,
    )


def completion(reply: Reply) -> dict[str, Any]:
    """The `chat.completion` object of a non-streaming response."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content if reply.content is not None or reply.calls else "",
        "refusal": None,
    }
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason}
    return {**_envelope(reply, "chat.completion"), "choices": [choice], "usage": reply.usage}


@dataclass(frozen=True)
class Stream:
    """A streamed reply as SSE events: `chunks` are the ones faults count (words, then tool
    call pieces); `head` (the role) comes before them, `tail` (finish, usage, DONE) after."""

    head: bytes
    chunks: list[bytes]
    tail: list[bytes]


def stream(reply: Reply, *, include_usage: bool) -> Stream:
    """Each call opens with its id, type and name (empty arguments), as OpenAI's stream does."""
    deltas: list[dict[str, Any]] = [{"content": word} for word in reply.words]
    for i, call in enumerate(reply.calls):
        function = {"name": call.name, "arguments": ""}
        deltas.append(_call_delta(i, {"id": call.id, "type": "function", "function": function}))
        for piece in split_arguments(call.arguments):
            deltas.append(_call_delta(i, {"function": {"arguments": piece}}))
    tail = [_chunk(reply, {}, reply.finish_reason)]
    if include_usage:
        usage = {**_envelope(reply, "chat.completion.chunk"), "choices": [], "usage": reply.usage}
        tail.append(_event(usage))
    tail.append(b"data: [DONE]\n\n")
    head = _chunk(reply, {"role": "assistant", "content": "", "refusal": None}, None)
    return Stream(head=head, chunks=[_chunk(reply, d, None) for d in deltas], tail=tail)


def _call_delta(index: int, fields: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


def _envelope(reply: Reply, kind: str) -> dict[str, Any]:
    return {"id": reply.id, "object": kind, "created": reply.created, "model": reply.model}


def _chunk(reply: Reply, delta: dict[str, Any], finish_reason: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    event = _event({**_envelope(reply, "chat.completion.chunk"), "choices": [choice]})
    return event.replace(b"\\\\u", b"\\u") if reply.raw_escapes else event


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(body) + b"\n\n"


def error_body(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error, its `type` following the status as the API's does."""
    return {"error": {"message": message, "type": error_type(status), "code": code, "param": None}}


def error_type(status: int) -> str:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
    kinds |= {403: "permission_error", 404: "not_found_error"}
    return kinds.get(status, "server_error" if status >= 500 else "invalid_request_error")
