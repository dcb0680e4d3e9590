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


# -- the Responses API (`/v1/responses`) ----------------------------------------------------
def chat_messages(instructions: str | None, items: Any) -> list[dict[str, Any]]:
    """A Responses request's input as chat messages (what the script and the log read):
    a response's text and the function calls after it make one assistant message."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function"}
            call["function"] = {"name": item.get("name"), "arguments": item.get("arguments")}
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")}
            )
        else:
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content)
            messages.append({"role": item.get("role", "user"), "content": content})
    return messages


def response_stream(reply: Reply) -> Stream:
    """A reply as the Responses API streams it: text deltas, then each function call's
    item and argument pieces; `response.completed` (or `incomplete`) with the usage."""
    n = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal n
        n += 1
        return (
            b"event: "
            + kind.encode()
            + b"\n"
            + _event({"type": kind, "sequence_number": n, **fields})
        )

    message_id = f"msg_{reply.id}"
    chunks = [
        event(
            "response.output_text.delta",
            item_id=message_id,
            output_index=0,
            content_index=0,
            delta=word,
            logprobs=[],
        )
        for word in reply.words
    ]
    output: list[dict[str, Any]] = []
    if reply.content:
        text = {"type": "output_text", "text": reply.content, "annotations": []}
        output.append(
            {
                "type": "message",
                "id": message_id,
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        )
    for i, call in enumerate(reply.calls, start=1):
        item = {
            "type": "function_call",
            "id": f"fc_{call.id}",
            "call_id": call.id,
            "name": call.name,
            "arguments": "",
        }
        chunks.append(event("response.output_item.added", output_index=i, item=item))
        for piece in split_arguments(call.arguments):
            chunks.append(
                event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=i,
                    delta=piece,
                )
            )
        done = {**item, "arguments": call.arguments, "status": "completed"}
        chunks.append(event("response.output_item.done", output_index=i, item=done))
        output.append(done)
    usage = reply.usage
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    response = {
        "id": f"resp_{reply.id}",
        "object": "response",
        "created_at": reply.created,
        "model": reply.model,
        "output": output,
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    if reply.finish_reason in ("length", "content_filter"):
        reason = "max_output_tokens" if reply.finish_reason == "length" else "content_filter"
        ended = {**response, "status": "incomplete", "incomplete_details": {"reason": reason}}
        tail = [event("response.incomplete", response=ended)]
    else:
        tail = [event("response.completed", response={**response, "status": "completed"})]
    head = event("response.created", response={**response, "status": "in_progress", "output": []})
    return Stream(head=head, chunks=chunks, tail=tail)
