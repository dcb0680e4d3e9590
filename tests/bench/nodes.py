"""The processes a benchmark measures: a Tether worker, a Tether dispatcher, the raw baseline.

Run as `python -m tests.bench.nodes KIND URL CONCURRENCY` by tests/bench/bench.py, KIND
one of `worker` (the tools of W1-W3, W5 and W6), `holding` and `recovery` (W4's),
`dispatcher` and `baseline`. The dispatcher is a process of its own, as in deploy/.
Every tool has default settings (heartbeat, ack wait, consumer limits), so the figures
are what a user gets without tuning.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import nats
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    Header,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from tether import App, Dispatcher, NatsConfig, NextSteps, Step, StepContext, Worker

BASE_STREAM = "BENCH"
BASE_STEPS = ["bench.s1", "bench.s2", "bench.s3"]
BASE_BUCKET = "bench-results"

app = App("bench")


def _record(ctx: StepContext) -> None:
    """W3 counts executions per (task, step) in a side file (one O_APPEND write)."""
    path = os.environ.get("BENCH_EXECUTIONS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{ctx.task_id} {ctx.step}\n".encode())
        os.close(fd)


@app.tool
async def first(ctx: StepContext, data: Any) -> Any:
    _record(ctx)
    return data


@app.tool
async def second(ctx: StepContext, data: Any) -> Any:
    _record(ctx)
    if isinstance(data, dict) and data.get("sleep"):
        await asyncio.sleep(data["sleep"])
    return data


@app.tool
async def third(ctx: StepContext, data: Any) -> Any:
    _record(ctx)
    return data


@app.tool
async def grow(ctx: StepContext, data: Any) -> Any:
    """W6: an agent turn that appends the next turn, until `data["until"]` turns."""
    turn = data["turn"]
    output = {"turn": turn, "note": "x" * 100}
    if turn + 1 >= data["until"]:
        return output
    following = Step(tool="grow", input={"turn": turn + 1, "until": data["until"]})
    return NextSteps(output=output, steps=[following])


holding_app = App("bench-holding")
recovery_app = App("bench-recovery")
"""W4's two workloads each have a tool of their own, so steps one leaves queued (more
than a worker holds at once) never reach the other's workers."""


@holding_app.tool
async def hold(ctx: StepContext, data: Any) -> Any:
    """W4 holding: a step that waits `data["seconds"]`, as a step waiting on a slow API."""
    await asyncio.sleep(data["seconds"])
    return {"held_s": data["seconds"]}


@recovery_app.tool
async def hold_for_recovery(ctx: StepContext, data: Any) -> Any:
    """W4 recovery: the same wait, on the workers that one is SIGKILLed from."""
    await asyncio.sleep(data["seconds"])
    return {"held_s": data["seconds"]}


WORKER_APPS = {"worker": app, "holding": holding_app, "recovery": recovery_app}


async def run_worker(url: str, concurrency: int, served: App) -> None:
    async with Worker(served, NatsConfig(url=url), concurrency=concurrency):
        await _until_signalled()


async def run_dispatcher(url: str, concurrency: int) -> None:
    async with Dispatcher(NatsConfig(url=url)):
        await _until_signalled()


async def run_baseline(url: str, concurrency: int) -> None:
    """Three durable pull consumers; each handler publishes the next step (PubAck awaited,
    with Nats-Msg-Id), then acks; the last step writes the result to a KV bucket."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    kv = await js.key_value(BASE_BUCKET)
    loops = []
    for index in range(len(BASE_STEPS)):
        durable = f"step{index + 1}"
        sub = await js.pull_subscribe_bind(durable, BASE_STREAM)
        following = BASE_STEPS[index + 1] if index + 1 < len(BASE_STEPS) else None
        loops.append(
            asyncio.create_task(_baseline_loop(js, kv, sub, following, index, concurrency))
        )
    await _until_signalled()
    for loop in loops:
        loop.cancel()
    await nc.close()


async def _baseline_loop(
    js: Any, kv: Any, sub: Any, following: str | None, index: int, concurrency: int
) -> None:
    slots = asyncio.Semaphore(concurrency)
    running: set[asyncio.Task[None]] = set()

    async def handle(msg: Any) -> None:
        try:
            task_id = msg.headers[Header.MSG_ID].rsplit(".", 1)[0]
            if following is not None:
                await js.publish(
                    following, msg.data, headers={Header.MSG_ID: f"{task_id}.{index + 1}"}
                )
            else:
                await kv.put(task_id, msg.data)
            await msg.ack()
        finally:
            slots.release()

    while True:
        await slots.acquire()
        free = 1
        while free < concurrency and not slots.locked():
            await slots.acquire()
            free += 1
        try:
            msgs = await sub.fetch(free, timeout=1.0)
        except TimeoutError:
            msgs = []
        for msg in msgs:
            task = asyncio.create_task(handle(msg))
            running.add(task)
            task.add_done_callback(running.discard)
        for _ in range(free - len(msgs)):
            slots.release()


async def provision_baseline(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name=BASE_STREAM,
            subjects=BASE_STEPS,
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=120,
        )
    )
    for index, subject in enumerate(BASE_STEPS):
        await js.add_consumer(
            BASE_STREAM,
            ConsumerConfig(
                durable_name=f"step{index + 1}",
                filter_subject=subject,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=5,
                max_ack_pending=1000,
            ),
        )
    await js.create_key_value(KeyValueConfig(bucket=BASE_BUCKET, storage=StorageType.FILE))
    await nc.close()


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    await stop.wait()


if __name__ == "__main__":
    kind, url, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind in WORKER_APPS:
        asyncio.run(run_worker(url, concurrency, WORKER_APPS[kind]))
    else:
        runners = {"dispatcher": run_dispatcher, "baseline": run_baseline}
        asyncio.run(runners[kind](url, concurrency))
