"""Restate: the agent wrapped in `RestateAgent` (restate-sdk's Pydantic AI integration:
model calls and, with `auto_wrap_tools`, tool calls journaled with `ctx.run`), run by a
service handler served with hypercorn and registered with restate-server; the client
calls it through the ingress. Restate has no stream of a handler's text to a client, so
the client sees the answer when the call returns."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from typing import Any

import bench_agent
import restate
from bench_agent import Seen, client_args, emit, run_scenario, run_waiting
from pydantic_ai.models.openai import OpenAIChatModel
from restate.ext.pydantic import RestateAgent

SERVICE = "BenchAgent"
agent = RestateAgent(
    bench_agent.build_agent("bench_agent", model=OpenAIChatModel("bench")), auto_wrap_tools=True
)
service = restate.Service(SERVICE)


@service.handler()
async def run(ctx: restate.Context, prompt: str) -> str:
    result = await agent.run(prompt, usage_limits=bench_agent.LIMITS)
    return result.output


waiter = restate.Workflow("BenchWait")


@waiter.main()
async def wait_then_run(ctx: restate.WorkflowContext, prompt: str) -> str:
    """The approval scenario: wait for the `approval` promise, then run the agent."""
    await ctx.promise("approval").value()
    result = await agent.run(prompt, usage_limits=bench_agent.LIMITS)
    return result.output


@waiter.handler()
async def approve(ctx: restate.WorkflowSharedContext) -> None:
    await ctx.promise("approval").resolve(True)


def register(admin: str, port: int) -> None:
    body = json.dumps({"uri": f"http://127.0.0.1:{port}", "force": True}).encode()
    request = urllib.request.Request(
        f"{admin}/deployments", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


async def serve(admin: str, port: int) -> None:
    import hypercorn.asyncio
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.h2_max_concurrent_streams = 2**31 - 1  # hypercorn's 100 would cap the runs at once
    server = asyncio.ensure_future(
        hypercorn.asyncio.serve(restate.app(services=[service, waiter]), config)
    )
    await asyncio.sleep(0.5)
    await asyncio.to_thread(register, admin, port)
    emit("ready")
    await server


async def client(ingress: str, argv: list[str]) -> None:
    import httpx2

    args = client_args(argv)
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx2.AsyncClient(timeout=None, limits=limits) as http:

        async def follow(run_id: str, prompt: str, seen: Seen) -> None:
            response = await http.post(
                f"{ingress}/{SERVICE}/run",
                json=prompt,
                headers={"idempotency-key": run_id},
            )
            response.raise_for_status()
            seen.result = response.json()
            seen.piece(seen.result)  # the whole answer at once: no stream through a handler

        async def start(run_id: str, prompt: str) -> Any:
            url = f"{ingress}/BenchWait/{run_id}/wait_then_run/send"
            (await http.post(url, json=prompt)).raise_for_status()

        async def approve_run(run_id: str, handle: Any) -> None:
            (await http.post(f"{ingress}/BenchWait/{run_id}/approve", json=None)).raise_for_status()

        async def finish(run_id: str, handle: Any, seen: Seen) -> None:
            response = await http.get(f"{ingress}/restate/workflow/BenchWait/{run_id}/attach")
            response.raise_for_status()
            seen.result = response.json()
            seen.piece(seen.result)

        if args.wait_s:
            await run_waiting(start, approve_run, finish, args)
        else:
            await run_scenario(follow, args)


def main(argv: list[str]) -> None:
    role, address = argv[0], argv[1]
    if role == "worker":
        asyncio.run(serve(address, int(argv[2])))
    else:
        asyncio.run(client(address, argv[2:]))


if __name__ == "__main__":
    main(sys.argv[1:])
