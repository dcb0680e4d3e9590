"""Tether: `tether worker` serves the app of tether_app.py; the client submits the
agent's task and follows its token stream (`--agent bench_pai` for the Pydantic AI agent
through the integration, `bench_native` for Tether's own `Agent`)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from bench_agent import Seen, client_args, emit, run_scenario, run_waiting

from tether import Client, NatsConfig, TaskStatus


def serve(url: str) -> None:
    """`tether worker tether_app:app` at its defaults, in this process (exec: the pid the
    harness measures and kills is the worker's). The harness's warm-up runs wait for it."""
    here = Path(__file__).parent
    os.environ["PYTHONPATH"] = os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])
    emit("ready")
    command = [sys.executable, "-m", "tether.cli", "worker", "tether_app:app", "--nats", url]
    os.execv(sys.executable, command)


async def client(url: str, agent: str, argv: list[str]) -> None:
    args = client_args(argv)
    async with Client(NatsConfig(url=url)) as tether:

        async def follow(run: str, prompt: str, seen: Seen) -> None:
            handle = await tether.submit_agent(agent, prompt, task_id=run)
            async for chunk in handle.stream():
                seen.piece(chunk.delta, part=chunk.step, attempt=chunk.attempt)
            seen.result = str(await handle.wait(timeout=600))

        async def start(run: str, prompt: str) -> object:
            handle = await tether.submit_agent(f"{agent}_wait", prompt, task_id=run)
            await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=600)
            return handle

        async def approve(run: str, handle: object) -> None:
            await tether.send_input(run, {"approved": True})

        async def finish(run: str, handle: object, seen: Seen) -> None:
            seen.result = str(await handle.wait(timeout=600))  # type: ignore[attr-defined]
            seen.piece(seen.result)

        if args.wait_s:
            await run_waiting(start, approve, finish, args)
        else:
            await run_scenario(follow, args)


def main(argv: list[str]) -> None:
    role, url = argv[0], argv[1]
    if role == "worker":
        serve(url)
    else:
        asyncio.run(client(url, argv[2], argv[3:]))


if __name__ == "__main__":
    main(sys.argv[1:])
