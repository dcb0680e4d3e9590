"""W4 of `just bench`: steps that wait, held by workers with default settings.

- W4 holding: N tasks whose one step waits `seconds`, submitted at once to one worker
  process with N slots. Once the steps run, a steady window in the middle of the wait
  measures what holding them costs: server messages per held step per second (the
  server's /varz `in_msgs + out_msgs`), the worker's and the server's CPU, and the
  worker's resident memory per held step.
- W4 recovery: M such steps held by worker A while worker B is up; A is SIGKILLed, and
  `rerun_s` is the time from the kill until every step has started again.

Every wait has a deadline: a worker that holds fewer steps than asked (a consumer limit)
gives figures for the steps it held, and says how many that was.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import nats
from nats.js.api import Header

from tests.bench.processes import CpuTime, Node
from tests.bench.server import server_messages
from tether import NatsServer
from tether.schemas.names import DEFAULT_NAMES as NAMES
from tether.schemas.plans import StepSpec, TaskSubmit

HOLDING_TARGETS = {
    "msgs_per_step_s": "target ≤ 0.2",
    "worker_cpu_pct": "target ≤ 25 (% of a core)",
    "worker_kb_per_step": "target ≤ 20",
}
RECOVERY_TARGETS = {"rerun_s": "target ≤ 3"}
QUIET_S = 5.0
"""Steps that stop starting for this long are all a worker will hold at once."""
SETTLE_S = 2.0
"""From the last start to the window: every held step's first heartbeat (1 s) is past."""
MARGIN_S = 2.0
"""The window ends this long before the first held step's wait does."""
GRACE_S = 60.0
"""Beyond the wait itself, how long the last steps may take to start again or complete."""


class _Event(msgspec.Struct):
    event: str
    task_id: str
    attempt: int | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class Progress:
    """Each task's progress as its status events tell it (one subscription to them all)."""

    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}
        self.first_started = 0.0
        self.last_started = 0.0
        self.restarted: dict[str, float] = {}
        """When each task's step first started again (attempt ≥ 2)."""
        self.completed: set[str] = set()

    @classmethod
    async def follow(cls, nc: Any) -> Progress:
        progress = cls()
        await nc.subscribe(NAMES.status_subject("*"), cb=progress.on_message)
        await nc.flush()
        return progress

    async def on_message(self, msg: Any) -> None:
        event = _decode_event(msg.data)
        now = time.monotonic()
        if event.event == "step_started":
            attempt = event.attempt or 1
            self.attempts[event.task_id] = max(attempt, self.attempts.get(event.task_id, 0))
            self.first_started = self.first_started or now
            self.last_started = now
            if attempt >= 2:
                self.restarted.setdefault(event.task_id, now)
        elif event.event == "completed":
            self.completed.add(event.task_id)

    def running(self) -> int:
        """Steps started and not completed."""
        return len(self.attempts) - len(self.completed)


async def submit(nc: Any, tool: str, task_ids: list[str], seconds: float) -> None:
    js = nc.jetstream()
    acks = []
    for task_id in task_ids:
        spec = StepSpec(tool=tool, input={"seconds": seconds})
        body = msgspec.json.encode(TaskSubmit(task_id=task_id, steps=[spec]))
        acks.append(
            await js.publish_async(
                NAMES.submit_subject(task_id), body, headers={Header.MSG_ID: task_id}
            )
        )
    await asyncio.gather(*acks)


async def until_counted(
    count: Callable[[], int], wanted: int, deadline: float, quiet: float | None = QUIET_S
) -> int:
    """Wait until `count()` reaches `wanted`, stops growing for `quiet` seconds once it
    has started, or `deadline` (monotonic) passes; return the count."""
    last, since = count(), time.monotonic()
    while last < wanted and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif now and quiet is not None and time.monotonic() - since >= quiet:
            break
    return last


async def holding(
    server: NatsServer, steps: int, seconds: float, window: float
) -> dict[str, float]:
    """W4 holding: the figures, per held step, of `steps` steps that wait `seconds`."""
    worker = Node("holding", server.url, steps)
    nc = await nats.connect(server.url)
    try:
        progress = await Progress.follow(nc)
        idle_kb = worker.memory_kb()
        run = uuid.uuid4().hex[:8]
        submitted = time.monotonic()
        await submit(nc, "hold", [f"w4-{run}-{i}" for i in range(steps)], seconds)
        held = await until_counted(progress.running, steps, submitted + seconds / 2)
        _say_held("W4 holding", held, steps, submitted, seconds)
        figures = await _steady_window(server, worker, progress, held, seconds, window)
        figures["worker_kb_per_step"] = (worker.memory_kb() - idle_kb) / held
        deadline = progress.last_started + seconds + GRACE_S
        figures["completed"] = await _completed(progress, steps, deadline, "W4 holding")
        return figures
    finally:
        await nc.close()
        worker.stop()


async def _steady_window(
    server: NatsServer,
    worker: Node,
    progress: Progress,
    held: int,
    seconds: float,
    window: float,
) -> dict[str, float]:
    await asyncio.sleep(SETTLE_S)
    room = progress.first_started + seconds - MARGIN_S - time.monotonic()
    if room < 1:
        raise RuntimeError(
            f"W4 holding: no steady window left: {held:,} steps took "
            f"{progress.last_started - progress.first_started:.1f}s to start, too long for a "
            f"{seconds:g}s wait; give a longer --hold-seconds"
        )
    if room < window:
        print(f"  W4 holding: the window is {room:.1f}s, not {window:g}s, to end within the wait")
    messages = await asyncio.to_thread(server_messages, server)
    started = time.perf_counter()
    with CpuTime(server.pid, [worker]) as cpu:
        await asyncio.sleep(min(window, room))
    elapsed = time.perf_counter() - started
    messages = await asyncio.to_thread(server_messages, server) - messages
    if progress.running() != held:
        print(f"  W4 holding: {progress.running():,} steps ran at the window's end, not {held:,}")
    return {
        "held": float(held),
        "window_s": elapsed,
        "msgs_per_step_s": messages / held / elapsed,
        "server_msgs_per_s": messages / elapsed,
        "server_cpu_pct": cpu.used["server"] / elapsed * 100,
        "worker_cpu_pct": cpu.used["workers"] / elapsed * 100,
    }


async def recovery(
    url: str, steps: int, seconds: float, settle: float = 0.0, workload: str = "W4 recovery"
) -> dict[str, float]:
    """W4 recovery: `steps` steps held on worker A, B up beside it (for `settle` seconds,
    as in a fleet that has been up a while); SIGKILL A."""
    nc = await nats.connect(url)
    first = Node("recovery", url, steps)
    second: Node | None = None
    try:
        progress = await Progress.follow(nc)
        run = uuid.uuid4().hex[:8]
        submitted = time.monotonic()
        await submit(nc, "hold_for_recovery", [f"w4r-{run}-{i}" for i in range(steps)], seconds)
        held = await until_counted(progress.running, steps, submitted + seconds / 2)
        _say_held(workload, held, steps, submitted, seconds)
        second = Node("recovery", url, steps)  # only now: A holds every step it will
        await asyncio.sleep(settle)
        if progress.completed:
            raise RuntimeError(f"{workload}: steps completed before the kill; raise the wait")
        first.kill()
        killed = time.monotonic()
        restarted = await until_counted(
            lambda: len(progress.restarted), held, killed + seconds + GRACE_S, quiet=None
        )
        if restarted < held:
            print(f"  {workload}: only {restarted:,} of {held:,} steps started again")
        times = sorted(progress.restarted.values())
        figures = {
            "held": float(held),
            "first_rerun_s": times[0] - killed if times else float("nan"),
            "p50_rerun_s": times[len(times) // 2] - killed if times else float("nan"),
            "rerun_s": times[-1] - killed if times else float("nan"),
            "restarted": float(restarted),
        }
        deadline = progress.last_started + seconds + GRACE_S
        figures["completed"] = await _completed(progress, steps, deadline, workload)
        return figures
    finally:
        await nc.close()
        for node in (first, second):
            if node is not None:
                node.stop()


async def _completed(progress: Progress, steps: int, deadline: float, workload: str) -> float:
    done = await until_counted(lambda: len(progress.completed), steps, deadline, quiet=None)
    if done < steps:
        print(f"  {workload}: {done:,} of {steps:,} tasks completed by the deadline; left queued")
    return float(done)


def _say_held(workload: str, held: int, steps: int, submitted: float, seconds: float) -> None:
    elapsed = time.monotonic() - submitted
    if held == 0:
        raise RuntimeError(
            f"{workload}: no step started within {elapsed:.0f}s of the submit; the bench "
            "discards the nodes' stderr: run `python -m tests.bench.nodes holding URL N` "
            "and `... dispatcher URL 1` by hand to see why"
        )
    if held == steps:
        print(f"  {workload}: all {steps:,} steps running {elapsed:.1f}s after the submit")
        return
    why = (
        f"the deadline, half the {seconds:g}s wait"
        if elapsed >= seconds / 2
        else f"none started for {QUIET_S:g}s"
    )
    print(
        f"  {workload}: only {held:,} of {steps:,} steps ran at once, {elapsed:.1f}s after "
        f"the submit ({why}); the figures are for those",
        flush=True,
    )
