"""DBOS: the agent with the `DBOSDurability` capability (model calls are steps), its
tools DBOS steps, run by a workflow that a worker takes from a queue; the client
enqueues it with `DBOSClient` and reads the text the model step writes to a DBOS
stream as it streams."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterable
from typing import Any

import bench_agent
from bench_agent import Seen, client_args, emit, run_scenario, run_waiting, text_of
from dbos import DBOS, DBOSClient
from pydantic_ai.durable_exec.dbos import DBOSDurability

QUEUE = "bench_agents"
STREAM = "tokens"


async def write_tokens(ctx: Any, events: AsyncIterable[Any]) -> None:
    """The event handler: the answer's text to the workflow's stream, as it comes."""
    async for event in events:
        text = text_of(event)
        if text:
            await DBOS.write_stream_async(STREAM, text)


def define() -> None:
    tools = [DBOS.step(name=f.__name__)(f) for f in bench_agent.TOOLS]
    durability = DBOSDurability(event_stream_handler=write_tokens)
    agent = bench_agent.build_agent("bench_agent", capabilities=[durability], tools=tools)

    @DBOS.workflow(name="bench_workflow")
    async def bench_workflow(prompt: str) -> str:
        result = await agent.run(prompt, usage_limits=bench_agent.LIMITS)
        return result.output

    @DBOS.workflow(name="bench_wait_workflow")
    async def bench_wait_workflow(prompt: str) -> str:
        """The approval scenario: wait for the `approval` message, then run the agent."""
        await DBOS.recv_async("approval", timeout_seconds=24 * 3600)
        result = await agent.run(prompt, usage_limits=bench_agent.LIMITS)
        return result.output


async def serve(database: str) -> None:
    DBOS(config={"name": "bench", "system_database_url": database})
    define()
    DBOS.launch()
    await DBOS.register_queue_async(QUEUE)  # kept in the system database, so after launch
    emit("ready")
    await asyncio.Event().wait()


async def client(database: str, argv: list[str]) -> None:
    args = client_args(argv)
    dbos = DBOSClient(system_database_url=database, use_listen_notify=True)

    async def follow(run: str, prompt: str, seen: Seen) -> None:
        options = {"queue_name": QUEUE, "workflow_name": "bench_workflow", "workflow_id": run}
        handle = await dbos.enqueue_async(options, prompt)  # type: ignore[arg-type]
        async for text in dbos.read_stream_async(run, STREAM):
            seen.piece(text)
        seen.result = await handle.get_result()

    async def start(run: str, prompt: str) -> Any:
        options = {"queue_name": QUEUE, "workflow_name": "bench_wait_workflow", "workflow_id": run}
        return await dbos.enqueue_async(options, prompt)  # type: ignore[arg-type]

    async def approve(run: str, handle: Any) -> None:
        await dbos.send_async(run, True, "approval")

    async def finish(run: str, handle: Any, seen: Seen) -> None:
        seen.result = await handle.get_result()
        seen.piece(seen.result)

    try:
        if args.wait_s:
            await run_waiting(start, approve, finish, args)
        else:
            await run_scenario(follow, args)
    finally:
        dbos.destroy()


def main(argv: list[str]) -> None:
    role, database = argv[0], argv[1]
    asyncio.run(serve(database) if role == "worker" else client(database, argv[2:]))


if __name__ == "__main__":
    main(sys.argv[1:])
