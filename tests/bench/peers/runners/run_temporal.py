"""Temporal: a worker with the Pydantic AI plugins serves the workflow of
temporal_flow.py; the client starts it and follows its Workflow Streams topic."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from bench_agent import Seen, client_args, emit, run_scenario, run_waiting, text_of
from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin
from temporal_flow import (
    TASK_QUEUE,
    BenchAgentWorkflow,
    BenchWaitWorkflow,
    agent,
    durability,
    quiet,
)
from temporalio.client import Client
from temporalio.worker import Worker


async def serve(address: str) -> None:
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[BenchAgentWorkflow, BenchWaitWorkflow],
        plugins=[AgentPlugin(agent), AgentPlugin(quiet)],
    )
    async with worker:
        emit("ready")
        await asyncio.Event().wait()


async def client(address: str, argv: list[str]) -> None:
    args = client_args(argv)
    temporal = await Client.connect(address, plugins=[PydanticAIPlugin()])

    async def follow(run: str, prompt: str, seen: Seen) -> None:
        handle = await temporal.start_workflow(
            BenchAgentWorkflow.run, prompt, id=run, task_queue=TASK_QUEUE
        )
        async with durability.stream_agent_events(temporal, handle, output_type=str) as events:
            async for event in events:
                seen.piece(text_of(event))
        seen.result = await handle.result()

    async def start(run: str, prompt: str) -> Any:
        return await temporal.start_workflow(
            BenchWaitWorkflow.run, prompt, id=run, task_queue=TASK_QUEUE
        )

    async def approve(run: str, handle: Any) -> None:
        await handle.signal(BenchWaitWorkflow.approve)

    async def finish(run: str, handle: Any, seen: Seen) -> None:
        seen.result = await handle.result()
        seen.piece(seen.result)

    if args.wait_s:
        await run_waiting(start, approve, finish, args)
    else:
        await run_scenario(follow, args)


def main(argv: list[str]) -> None:
    role, address = argv[0], argv[1]
    asyncio.run(serve(address) if role == "worker" else client(address, argv[2:]))


if __name__ == "__main__":
    main(sys.argv[1:])
