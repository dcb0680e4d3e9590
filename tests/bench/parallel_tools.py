"""Three 1-second tools asked in one model response: the wall time of a bare Pydantic AI
and OpenAI Agents SDK run, and of the same agent added to a Tether app (submitted,
followed to its result), on the scripted model. Medians of `--runs`.

    python -m tests.bench.parallel_tools [--runs 3] [--seconds 1]

A fresh nats-server and scripted model; the worker runs in this process, as the bare
runs do. Tools run one after another show as three times the tools' time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tether import App, Client, NatsConfig, NatsServer, Worker
from tether.testing.llm import ScriptedModel

SECONDS = 1.0
"""How long each tool takes (`--seconds`)."""


async def pause(name: str) -> str:
    """Wait a while, as a tool that calls a slow service does."""
    await asyncio.sleep(SECONDS)
    return f"{name} done"


def agents() -> tuple[Any, Any]:
    """The same two agents, bare: Pydantic AI's and the Agents SDK's (built once the
    scripted model's URL is known)."""
    from agents import Agent, function_tool, set_default_openai_api, set_tracing_disabled
    from pydantic_ai import Agent as PydanticAgent

    set_default_openai_api("chat_completions")
    set_tracing_disabled(True)
    pydantic = PydanticAgent("openai-chat:scripted", name="pai_pauses", tools=[pause])
    sdk = Agent(name="oai_pauses", tools=[function_tool(pause)], model="scripted")
    return pydantic, sdk


def turns() -> list[dict[str, Any]]:
    calls = [{"name": "pause", "arguments": {"name": n}} for n in "abc"]
    return [{"tool_calls": calls}, {"content": "All done."}]


async def timed(run: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    assert await run() == "All done."
    return time.perf_counter() - started


async def measure(runs: int) -> dict[str, list[float]]:
    from agents import Runner

    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as store, ScriptedModel() as model:
        os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = model.base_url, "bench"
        pydantic, sdk = agents()
        server = NatsServer(store).start()
        config = NatsConfig(url=server.url)
        app = App("bench-parallel-tools")
        app.add(pydantic)
        app.add(sdk)
        try:
            async with Worker(app, config), Client(config) as client:

                async def bare_pydantic() -> object:
                    return (await pydantic.run(model.conversation(*turns()))).output

                async def bare_sdk() -> object:
                    return (await Runner.run(sdk, model.conversation(*turns()))).final_output

                def on_tether(agent: str) -> Callable[[], Awaitable[object]]:
                    async def run() -> object:
                        handle = await client.submit_agent(agent, model.conversation(*turns()))
                        return await handle.wait(timeout=60)

                    return run

                cases = {
                    "Pydantic AI, bare": bare_pydantic,
                    "Pydantic AI, on Tether": on_tether("pai_pauses"),
                    "Agents SDK, bare": bare_sdk,
                    "Agents SDK, on Tether": on_tether("oai_pauses"),
                }
                for name, run in cases.items():
                    await timed(run)  # warm up: connections, the models' clients
                    times[name] = [await timed(run) for _ in range(runs)]
        finally:
            server.stop()
    return times


def main(argv: list[str] | None = None) -> None:
    global SECONDS
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.parallel_tools", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=SECONDS, help="each tool's time")
    args = parser.parse_args(argv)
    SECONDS = args.seconds
    times = asyncio.run(measure(args.runs))
    bare = {}
    for name, runs in times.items():
        median = statistics.median(runs)
        framework, _, where = name.partition(", ")
        if where == "bare":
            bare[framework] = median
        ratio = f"  ({median / bare[framework]:.2f}x bare)" if where != "bare" else ""
        spread = ", ".join(f"{t:.2f}" for t in runs)
        print(f"{name:24} median {median:.2f} s  [{spread}]{ratio}")


if __name__ == "__main__":
    main()
