"""What every peer's runner shares: the agent (two tools, the bench model), its tools'
timing log, the client's scenarios, and the JSON lines a runner speaks to the harness.

Only Pydantic AI and the standard library are imported here: each runner runs in its
peer's own environment. A runner is `run_<peer>.py worker ...` (serves the agent until
SIGTERM, printing `{"event": "ready"}` once it can) or `run_<peer>.py client ...` (runs
a scenario, one `{"event": "run", ...}` line per run, then `{"event": "end"}`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.usage import UsageLimits

MODEL = "openai-chat:bench"
"""The bench model at $OPENAI_BASE_URL, on the Chat Completions API."""
INSTRUCTIONS = "Look the weather up, convert it, then answer."
LIMITS = UsageLimits(request_limit=None)
"""Every run may make as many model requests as its plan has turns (the growth scenario's
200; Pydantic AI's default stops a run at 50)."""


def emit(event: str, **fields: Any) -> None:
    """One JSON line to the harness."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _log_tool(line: dict[str, Any]) -> None:
    path = os.environ.get("BENCH_TOOL_LOG")
    if path:
        with open(path, "a") as out:  # one short write per line: appends do not interleave
            out.write(json.dumps(line) + "\n")


async def _timed(tool: str, run: str, turn: int, sleep_ms: int, result: str) -> str:
    start = time.monotonic()
    _log_tool({"tool": tool, "run": run, "turn": turn, "phase": "start", "t": start})
    if sleep_ms:
        await asyncio.sleep(sleep_ms / 1000)
    end = time.monotonic()
    _log_tool({"tool": tool, "run": run, "turn": turn, "phase": "end", "start": start, "t": end})
    return result


async def get_weather(run: str, turn: int, sleep_ms: int, city: str) -> str:
    """The weather in a city, in degrees Celsius."""
    return await _timed("get_weather", run, turn, sleep_ms, f"18 C in {city}")


async def to_fahrenheit(run: str, turn: int, sleep_ms: int, celsius: int) -> str:
    """Convert degrees Celsius to Fahrenheit."""
    return await _timed("to_fahrenheit", run, turn, sleep_ms, f"{celsius * 9 / 5 + 32:g} F")


TOOLS = (get_weather, to_fahrenheit)


def build_agent(
    name: str = "bench_agent",
    *,
    capabilities: Sequence[Any] = (),
    tools: Sequence[Callable[..., Any]] = TOOLS,
    model: Any = MODEL,
    agent_class: type[Agent[None, str]] = Agent,
    **options: Any,
) -> Agent[None, str]:
    """The agent of the comparison, the same for every peer (its durability aside)."""
    return agent_class(
        model,
        name=name,
        instructions=INSTRUCTIONS,
        tools=list(tools),
        capabilities=list(capabilities),
        defer_model_check=True,
        **options,
    )


def text_of(event: Any) -> str | None:
    """The answer text an agent stream event carries, if any."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content or None
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta or None
    return None


def prompt(run: str, turns: int, tool_ms: int, words: int) -> str:
    """The question; the bench model reads its plan from it (see tests/bench/peers/model.py)."""
    return f"run={run} turns={turns} tool_ms={tool_ms} words={words} What should I wear?"


@dataclass
class Seen:
    """What a client saw of one run: when it asked, its first token, its end, the text."""

    run: str
    submitted: float = 0.0
    first_token: float | None = None
    done: float | None = None
    parts: dict[Any, tuple[int, list[str]]] = field(default_factory=dict)
    """Text by part (a step, say), with the attempt that wrote it."""
    raw: list[str] = field(default_factory=list)
    """Every piece as it came, as a follower that prints them would show it."""
    restarts: int = 0
    """Parts whose text a later attempt started over (the peer's rule drops the first)."""
    result: str | None = None
    error: str | None = None

    def piece(self, text: str | None, part: Any = None, attempt: int = 0) -> None:
        if not text:
            return
        if self.first_token is None:
            self.first_token = time.monotonic()
        self.raw.append(text)
        seen, pieces = self.parts.get(part, (attempt, []))
        if attempt > seen:
            self.restarts += 1
            pieces = []
        self.parts[part] = (attempt, [*pieces, text])

    def line(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "submitted": self.submitted,
            "first_token": self.first_token,
            "done": self.done,
            "text": "".join("".join(pieces) for _, pieces in self.parts.values()),
            "raw": "".join(self.raw),
            "restarts": self.restarts,
            "result": self.result,
            "error": self.error,
        }


Follow = Callable[[str, str, Seen], Awaitable[None]]
"""Start run `run` with `prompt` and follow it to its end, feeding `seen` as text comes."""


async def _one(follow: Follow, run: str, text: str) -> dict[str, Any]:
    seen = Seen(run, submitted=time.monotonic())
    try:
        await follow(run, text, seen)
    except Exception as error:  # reported, not raised: one failed run must not hide the rest
        seen.error = f"{type(error).__name__}: {error}"[:500]
    seen.done = time.monotonic()
    return seen.line()


async def run_scenario(follow: Follow, args: argparse.Namespace) -> None:
    """`--runs` runs, `--concurrency` at a time; one line each, then `end`."""
    tag = args.tag or uuid.uuid4().hex[:6]
    runs = [f"{tag}-{i}" for i in range(args.runs)]
    gate = asyncio.Semaphore(args.concurrency)
    emit("started", t=time.monotonic())

    async def bounded(run: str) -> None:
        async with gate:
            line = await _one(follow, run, prompt(run, args.turns, args.tool_ms, args.words))
            emit("run", **line)

    await asyncio.gather(*(bounded(r) for r in runs))
    emit("end", t=time.monotonic())


def client_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tool-ms", type=int, default=0)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--tag", default="")
    parser.add_argument("--follow-only", default="", help="follow this run, started elsewhere")
    parser.add_argument(
        "--wait-s", type=float, default=0.0, help="the approval scenario: hold so long"
    )
    return parser.parse_known_args(argv)[0]


async def events_text(events: AsyncIterator[Any], seen: Seen) -> None:
    """Feed `seen` from a Pydantic AI event stream."""
    async for event in events:
        seen.piece(text_of(event))


Start = Callable[[str, str], Awaitable[Any]]
"""Start run `run` with `prompt`; return its handle once it waits for its approval."""
Approve = Callable[[str, Any], Awaitable[None]]
Finish = Callable[[str, Any, Seen], Awaitable[None]]
"""Wait for an approved run's end, feeding `seen` its answer."""


async def run_waiting(
    start: Start, approve: Approve, finish: Finish, args: argparse.Namespace
) -> None:
    """The approval scenario: start `--runs` runs (`--concurrency` at a time) that each wait
    for an approval; `waiting` once all wait, hold `--wait-s`, `approving`, approve them all
    at once; one `run` line each as it ends, then `end`."""
    tag = args.tag or uuid.uuid4().hex[:6]
    runs = [f"{tag}-{i}" for i in range(args.runs)]
    gate = asyncio.Semaphore(args.concurrency)
    emit("started", t=time.monotonic())
    failed: dict[str, str] = {}

    async def begin(run: str) -> Any:
        async with gate:
            try:
                return await start(run, prompt(run, args.turns, args.tool_ms, args.words))
            except Exception as error:
                failed[run] = f"{type(error).__name__}: {error}"[:500]
                return None

    handles = await asyncio.gather(*(begin(r) for r in runs))
    emit("waiting", t=time.monotonic(), failed=len(failed))
    await asyncio.sleep(args.wait_s)
    emit("approving", t=time.monotonic())

    async def end(run: str, handle: Any) -> None:
        seen = Seen(run, submitted=time.monotonic(), error=failed.get(run))
        if seen.error is None:
            try:
                async with gate:
                    await approve(run, handle)
                await finish(run, handle, seen)
            except Exception as error:
                seen.error = f"{type(error).__name__}: {error}"[:500]
        seen.done = time.monotonic()
        emit("run", **seen.line())

    await asyncio.gather(*(end(r, h) for r, h in zip(runs, handles, strict=True)))
    emit("end", t=time.monotonic())
