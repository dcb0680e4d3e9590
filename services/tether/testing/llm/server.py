"""The scripted model's HTTP app: `/v1/chat/completions` answered from a script, with faults."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tether.testing.llm import replies
from tether.testing.llm.replies import Reply
from tether.testing.llm.script import (
    Fault,
    Script,
    ScriptError,
    Turn,
    decode_script,
    first_user_text,
    message_text,
    select_conversation,
    select_turn,
    turn_number,
)


class ChatRequest(msgspec.Struct, frozen=True):
    """The fields of a chat request the script needs; the rest are accepted and ignored."""

    messages: list[dict[str, Any]]
    model: str = "scripted"
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    api: str = "chat"
    """Which API the request came by (`responses`: read from a Responses request)."""

    @property
    def tool_results(self) -> list[str | None]:
        """The `tool_call_id` of each tool result in the conversation, in order."""
        return [m.get("tool_call_id") for m in self.messages if m.get("role") == "tool"]

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    @property
    def tool_names(self) -> list[str]:
        names = [(t.get(t.get("type", "function")) or {}).get("name") for t in self.tools or []]
        return [n for n in names if isinstance(n, str)]


_request_decoder = msgspec.json.Decoder(ChatRequest)


class ResponsesRequest(msgspec.Struct, frozen=True):
    """The fields of a Responses API request the script needs."""

    input: str | list[dict[str, Any]] = msgspec.field(default_factory=list)
    instructions: str | None = None
    model: str = "scripted"
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    text: dict[str, Any] | None = None
    tool_choice: Any = None
    temperature: float | None = None


_responses_decoder = msgspec.json.Decoder(ResponsesRequest)


class Dropped(Exception):
    """Raised mid-response to abort the connection: uvicorn closes the transport of a
    response that has started, so the client sees the body end without its last chunk."""


class QuietDrops(logging.Filter):
    """Keep uvicorn from logging a traceback for every deliberate drop."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BaseExceptionGroup):
            return error.subgroup(Dropped) is None
        return not isinstance(error, Dropped)


class ScriptedServer:
    """The script, the attempt counters and the request log of one server process."""

    def __init__(
        self, script: Script, *, chunk_delay: float | None = None, log: Path | None = None
    ) -> None:
        self.script = script
        self.chunk_delay_override = chunk_delay
        self.log_path = log
        self.attempts: Counter[tuple[str, int]] = Counter()
        self.log: list[dict[str, Any]] = []

    @property
    def chunk_delay(self) -> float:
        override = self.chunk_delay_override
        return self.script.chunk_delay if override is None else override

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/props", self.props, methods=["GET"]),
                Route("/log", self.get_log, methods=["GET"]),
                Route("/script", self.load_script, methods=["POST"]),
            ]
        )

    async def chat(self, request: Request) -> Response:
        try:
            body = _request_decoder.decode(await request.body())
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid chat request: {exc}")
        return self.answer(body)

    async def responses(self, request: Request) -> Response:
        """The Responses API, answered from the same script: the request is read as the
        chat request it stands for, and the reply streamed as Responses events."""
        try:
            raw = _responses_decoder.decode(await request.body())
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid responses request: {exc}")
        text_format = (raw.text or {}).get("format") or {}
        tools = [{"type": "function", "function": t} for t in raw.tools or []]
        body = ChatRequest(
            messages=replies.chat_messages(raw.instructions, raw.input),
            model=raw.model,
            stream=raw.stream,
            tools=tools or None,
            response_format=text_format or None,
            tool_choice=raw.tool_choice,
            temperature=raw.temperature,
            api="responses",
        )
        return self.answer(body)

    def answer(self, body: ChatRequest) -> Response:
        conversation = first_user_text(body.messages)
        k = turn_number(body.messages)
        if self.script.refuse_json_schema and (body.response_format or {}).get("type") == (
            "json_schema"
        ):
            self.record(body, conversation, k, -1, None)
            return _error(400, "response_format 'json_schema' is not supported by this server")
        attempt = self.attempts[(conversation, k)]
        self.attempts[(conversation, k)] += 1
        try:
            turn = select_turn(select_conversation(self.script, conversation), k)
        except ScriptError as exc:
            self.record(body, conversation, k, attempt, None)
            return _error(400, str(exc))
        fault = turn.faults[attempt] if attempt < len(turn.faults) else None
        self.record(body, conversation, k, attempt, fault)
        return self.respond(body, turn, k, attempt, fault)

    def respond(
        self, body: ChatRequest, turn: Turn, k: int, attempt: int, fault: Fault | None
    ) -> Response:
        if fault is not None and fault.status is not None:
            return _fault_error(fault, fault.status)
        if fault is not None and fault.empty:
            turn = msgspec.structs.replace(turn, content="", tool_calls=[])
        reply = replies.make_reply(
            turn,
            k=k,
            attempt=attempt,
            model=body.model,
            created=int(time.time()),
            messages=body.messages,
        )
        if body.api == "responses":
            events = self.stream(replies.response_stream(reply), fault)
            return StreamingResponse(events, media_type="text/event-stream")
        if body.stream:
            plan = replies.stream(reply, include_usage=body.include_usage)
            return StreamingResponse(self.stream(plan, fault), media_type="text/event-stream")
        return _whole(reply, fault)

    async def stream(self, plan: replies.Stream, fault: Fault | None) -> AsyncIterator[bytes]:
        drop_at = fault.drop_after if fault else None
        end_at = fault.end_after if fault else None
        stall_at = fault.stall_after if fault else None
        yield plan.head
        for i, chunk in enumerate([*plan.chunks, None]):
            if i == drop_at:
                raise Dropped
            if i == end_at:
                return  # a clean end of the body, with no finish_reason
            if i == stall_at and fault is not None:
                await asyncio.sleep(fault.seconds or 0.0)
            if chunk is None:
                break
            if i and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            yield chunk
        for event in plan.tail:
            yield event

    def record(
        self, body: ChatRequest, conversation: str, k: int, attempt: int, fault: Fault | None
    ) -> None:
        entry = {
            "time": datetime.now(UTC).isoformat(),
            "conversation": conversation,
            "turn": k,
            "attempt": attempt,
            "stream": body.stream,
            "model": body.model,
            "messages": len(body.messages),
            "tool_results": body.tool_results,
            "tool_texts": [message_text(m) for m in body.messages if m.get("role") == "tool"],
            "user_texts": [message_text(m) for m in body.messages if m.get("role") == "user"],
            "api": body.api,
            "tools": body.tool_names,
            "functions": [t.get("function") for t in body.tools or []],
            "tool_choice": body.tool_choice,
            "temperature": body.temperature,
            "max_tokens": body.max_completion_tokens or body.max_tokens,
            "response_format": body.response_format,
            "system": next(
                (message_text(m) for m in body.messages if m.get("role") == "system"), None
            ),
            "last": {
                "role": body.messages[-1].get("role") if body.messages else None,
                "text": message_text(body.messages[-1])[:2000] if body.messages else "",
            },
            "fault": msgspec.to_builtins(fault) if fault else None,
        }
        self.log.append(entry)
        if self.log_path is not None:
            with self.log_path.open("ab") as out:
                out.write(msgspec.json.encode(entry) + b"\n")

    async def models(self, request: Request) -> Response:
        model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "tether"}
        return JSONResponse({"object": "list", "data": [model]})

    async def props(self, request: Request) -> Response:
        """llama-server's `/props`, the part Tether reads (`script.template_tools`)."""
        if self.script.template_tools is None:
            return _error(404, "File Not Found")
        caps = {"supports_tools": self.script.template_tools}
        return JSONResponse({"chat_template_caps": caps, "model_alias": "scripted"})

    async def get_log(self, request: Request) -> Response:
        return JSONResponse(self.log)

    async def load_script(self, request: Request) -> Response:
        try:
            self.script = decode_script(await request.body())
        except ScriptError as exc:
            return _error(400, str(exc))
        self.attempts.clear()
        return JSONResponse({"ok": True})


def _whole(reply: Reply, fault: Fault | None) -> Response:
    """A non-streaming reply; `drop_after` cuts its body in half, `stall_after` delays it."""
    body = msgspec.json.encode(replies.completion(reply))
    if fault is None or fault.ok:
        return Response(body, media_type="application/json")

    async def faulty() -> AsyncIterator[bytes]:
        if fault.stall_after is not None:
            await asyncio.sleep(fault.seconds or 0.0)
        if fault.drop_after is not None:
            yield body[: len(body) // 2]
            raise Dropped
        yield body

    headers = {"content-length": str(len(body))}
    return StreamingResponse(faulty(), media_type="application/json", headers=headers)


def _fault_error(fault: Fault, status: int) -> Response:
    message = fault.message or f"scripted fault: HTTP {status}"
    headers = {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
    return JSONResponse(replies.error_body(status, message, fault.code), status, headers)


def _error(status: int, message: str) -> Response:
    return JSONResponse(replies.error_body(status, message), status)
