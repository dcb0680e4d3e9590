"""Bare: the agent in the client's own process, no durability (the baseline)."""

from __future__ import annotations

import asyncio
import sys

from bench_agent import LIMITS, Seen, build_agent, client_args, emit, events_text, run_scenario

agent = build_agent()


async def follow(run: str, prompt: str, seen: Seen) -> None:
    async with agent.run_stream_events(prompt, usage_limits=LIMITS) as events:
        await events_text(events, seen)


def main(argv: list[str]) -> None:
    role, rest = argv[0], argv[1:]
    if role == "worker":  # nothing to serve: the client runs the agent
        emit("ready")
        return
    asyncio.run(run_scenario(follow, client_args(rest)))


if __name__ == "__main__":
    main(sys.argv[1:])
