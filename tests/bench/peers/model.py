"""The bench's model: an OpenAI-compatible chat endpoint with a fixed latency per turn and
per token, that logs when each request arrived, sent its first chunk and ended.

`python -m tests.bench.peers.model --turn-ms 50 --token-ms 5 --log requests.jsonl`

Every conversation follows one plan, read from its first user message
(`run=<id> turns=<n> tool_ms=<ms> words=<w>`): turn k < n-1 calls one tool (`get_weather`
on even turns, `to_fahrenheit` on odd ones) with the run id among its arguments, the last
turn streams `answer(run, words)`. Each turn waits `--turn-ms` before its first chunk and
`--token-ms` between chunks, streamed or not, so a peer that does not stream pays the
same model time. The log holds one line per request (monotonic seconds, comparable across
processes on one machine); a request whose client went away is logged `"cut": true`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn

TOOLS = ("get_weather", "to_fahrenheit")
_SETTING = re.compile(r"(\w+)=(\S+)")
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


def answer(run: str, words: int) -> str:
    """The final answer of a run: what a following client must be shown, once and whole."""
    return f"Answer for {run}:" + "".join(f" w{i}" for i in range(words))


def settings(messages: list[dict[str, Any]]) -> dict[str, str]:
    first = next((m for m in messages if m.get("role") == "user"), {})
    content = first.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return dict(_SETTING.findall(content or ""))


def tool_call(run: str, turn: int, tool_ms: int) -> dict[str, Any]:
    name = TOOLS[turn % 2]
    arguments = {"run": run, "turn": turn, "sleep_ms": tool_ms}
    arguments |= {"city": "Oslo"} if name == "get_weather" else {"celsius": 18}
    return {"id": f"call_{turn}", "name": name, "arguments": json.dumps(arguments)}


class Bench:
    """The plan, the latencies and the request log of one server process."""

    def __init__(self, turn_ms: float, token_ms: float, log: Path | None) -> None:
        self.turn_s = turn_ms / 1000
        self.token_s = token_ms / 1000
        self.log = log.open("a", buffering=1) if log else None

    def reply(self, messages: list[dict[str, Any]]) -> tuple[str, int, list[dict[str, Any]]]:
        """(run, turn, deltas) for a request: one tool call, or the answer word by word."""
        plan = settings(messages)
        run, turns = plan.get("run", "?"), int(plan.get("turns", "3"))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn < turns - 1:
            call = tool_call(run, turn, int(plan.get("tool_ms", "0")))
            args = call["arguments"]
            head = {"index": 0, "id": call["id"], "type": "function"}
            pieces = [args[: len(args) // 2], args[len(args) // 2 :]]
            deltas = [
                {"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]}
            ]
            deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces]
            return run, turn, deltas
        text = answer(run, int(plan.get("words", "20")))
        words = re.findall(r"\S+\s*|\s+", text)
        return run, turn, [{"content": w} for w in words]

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        arrived = time.monotonic()
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"].endswith("/models"):
            await _json(send, {"object": "list", "data": [{"id": "bench", "object": "model"}]})
            return
        request = json.loads(body or b"{}")
        run, turn, deltas = self.reply(request.get("messages", []))
        entry: dict[str, Any] = {"run": run, "turn": turn, "phase": "end", "start": arrived}
        entry["stream"] = False
        gone = asyncio.ensure_future(receive())  # completes with http.disconnect
        try:
            if request.get("stream"):
                entry["stream"] = True
                await self.stream(send, deltas, entry, bool(request.get("stream_options")), gone)
            else:
                await asyncio.sleep(self.turn_s)  # as streamed: "first" when it would start
                entry["first"] = time.monotonic()
                self.write({"run": run, "turn": turn, "phase": "first", "t": entry["first"]})
                await asyncio.sleep(self.token_s * (len(deltas) - 1))
                if gone.done():
                    raise _Gone
                await _json(send, _completion(deltas))
            entry["end"] = time.monotonic()
        except _Gone:
            entry["cut"] = True
        except (OSError, asyncio.CancelledError):
            entry["cut"] = True
            raise
        finally:
            gone.cancel()
            entry["logged"] = time.monotonic()
            self.write(entry)

    def write(self, line: dict[str, Any]) -> None:
        if self.log:
            self.log.write(json.dumps(line) + "\n")

    async def stream(
        self,
        send: Send,
        deltas: list[dict[str, Any]],
        entry: dict[str, Any],
        usage: bool,
        gone: asyncio.Future[dict[str, Any]],
    ) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await asyncio.sleep(self.turn_s)
        finish = "tool_calls" if "tool_calls" in deltas[0] else "stop"
        for i, delta in enumerate(deltas):
            if i:
                await asyncio.sleep(self.token_s)
            if gone.done():  # the client went away: uvicorn would drop what follows
                raise _Gone
            await _event(send, _chunk(delta if i else {"role": "assistant", **delta}, None))
            if "first" not in entry:
                entry["first"] = time.monotonic()
                self.write(
                    {
                        "run": entry["run"],
                        "turn": entry["turn"],
                        "phase": "first",
                        "t": entry["first"],
                    }
                )
            entry["sent"] = i + 1
        await _event(send, _chunk({}, finish))
        if usage:
            await _event(send, {**_ENVELOPE, "choices": [], "usage": _usage(len(deltas))})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


class _Gone(Exception):
    """The client closed the connection mid-stream (a worker killed, say)."""


_ENVELOPE = {
    "id": "chatcmpl-bench",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "bench",
}


def _usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}


def _chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {**_ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _completion(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if "tool_calls" in deltas[0]:
        call = deltas[0]["tool_calls"][0]
        arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:])
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {**call["function"], "arguments": arguments},
            }
        ]
        finish = "tool_calls"
    else:
        message["content"] = "".join(d["content"] for d in deltas)
        finish = "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {
        **_ENVELOPE,
        "object": "chat.completion",
        "choices": [choice],
        "usage": _usage(len(deltas)),
    }


async def _event(send: Send, body: dict[str, Any]) -> None:
    data = b"data: " + json.dumps(body).encode() + b"\n\n"
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _json(send: Send, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"listening on http://127.0.0.1:{port}/v1", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers.model")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--turn-ms", type=float, default=50.0, help="before a turn's first chunk")
    parser.add_argument("--token-ms", type=float, default=5.0, help="between chunks")
    parser.add_argument("--log", type=Path, help="append one JSON line per request")
    args = parser.parse_args(argv)
    app = Bench(args.turn_ms, args.token_ms, args.log)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        backlog=4096,
    )
    _Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
