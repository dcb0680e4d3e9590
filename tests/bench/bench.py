"""`just bench`: Tether against a raw JetStream hand-off pipeline, measured in the same run.

Starts its own nats-server (file storage) and node processes, runs each workload
`--runs` times, prints medians with their spread and ratios to the baseline, and
writes JSON lines and a Markdown table with `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.js.api import Header

from tests.bench.agents import LONG_TURNS, STREAM_WORDS
from tests.bench.agents import measure as agent_workloads
from tests.bench.listing import measure as listing_figures
from tests.bench.nodes import BASE_BUCKET, BASE_STEPS, provision_baseline
from tether import NatsServer
from tether.nats.store import Store
from tether.schemas.names import DEFAULT_NAMES as NAMES
from tether.schemas.tasks import StepSpec, TaskSubmit
from tether.testing.progress import stored_steps

ROOT = Path(__file__).resolve().parents[2]
GROWTH_TURNS = 502
GROWTH_SAMPLES = [10, 100, 500]
"""W5 samples steps 10, 100 and 500 (not the last step, which writes no checkpoint)."""
FAN_OUT_SLEEP = 0.05
"""W4's branch time: the ideal wall time of the whole fan-out, with no overhead."""


@dataclass
class Result:
    workload: str
    system: str
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.metrics.setdefault(key, []).append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.metrics[key])

    def spread(self, key: str) -> str:
        values = self.metrics[key]
        return f"{min(values):.4g}–{max(values):.4g}"


class Node:
    """A node process: a Tether worker or dispatcher, or the baseline's handlers."""

    def __init__(
        self, kind: str, url: str, concurrency: int, env: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.nodes", kind, url, str(concurrency)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}/services:{ROOT}", **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the {kind} node did not start")

    def peak_memory_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


class CpuTime:
    """CPU seconds that the server, the workers (or the baseline's handlers) and the
    dispatcher spend in a block: steadier than wall time on a shared machine."""

    def __init__(self, server: int | None, workers: list[Node], dispatcher: Node | None = None):
        self.pids = {
            "server": [server] if server else [],
            "workers": [n.process.pid for n in workers],
            "dispatcher": [dispatcher.process.pid] if dispatcher else [],
        }
        self.used: dict[str, float] = {}

    def __enter__(self) -> CpuTime:
        self.used = {role: -_cpu_seconds(pids) for role, pids in self.pids.items()}
        return self

    def __exit__(self, *exc: object) -> None:
        for role, pids in self.pids.items():
            self.used[role] += _cpu_seconds(pids)

    def per_task(self, tasks: int) -> dict[str, float]:
        """CPU ms per task, by process role (roles without a process are left out)."""
        return {
            f"cpu_ms_per_task_{role}": self.used[role] * 1000 / tasks
            for role, pids in self.pids.items()
            if pids
        }


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes, from /proc (0 where /proc is missing)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Completions:
    """Counts completions seen on a subject and times each task's."""

    def __init__(self, extract: Callable[[Any], str | None]) -> None:
        self.extract = extract
        self.done: dict[str, float] = {}
        self.waiters: dict[str, asyncio.Future[float]] = {}
        self.expected = 0
        self.all_done = asyncio.Event()

    async def on_message(self, msg: Any) -> None:
        task_id = self.extract(msg)
        if task_id is None or task_id in self.done:
            return
        now = time.perf_counter()
        self.done[task_id] = now
        waiter = self.waiters.pop(task_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(now)
        if self.expected and len(self.done) >= self.expected:
            self.all_done.set()


def tether_completion(msg: Any) -> str | None:
    if msg.data.startswith(b'{"event":"completed"'):
        return str(msg.subject.rsplit(".", 1)[-1])
    return None


def baseline_completion(msg: Any) -> str | None:
    return str(msg.subject.rsplit(".", 1)[-1])


def payload(size: int, index: int) -> dict[str, Any]:
    return {"n": index, "text": "x" * max(0, size - 30)}


class Bench:
    def __init__(self, url: str) -> None:
        self.url = url

    async def _connect(self, system: str) -> tuple[Any, Completions]:
        nc = await nats.connect(self.url)
        if system == "tether":
            completions = Completions(tether_completion)
            await nc.subscribe(NAMES.status_subject("*"), cb=completions.on_message)
        else:
            completions = Completions(baseline_completion)
            await nc.subscribe(f"$KV.{BASE_BUCKET}.*", cb=completions.on_message)
        await nc.flush()
        return nc, completions

    async def _submit(
        self, nc: Any, system: str, task_id: str, data: dict[str, Any], sleep: float = 0
    ) -> Any:
        js = nc.jetstream()
        if system == "tether":
            steps = [
                StepSpec(tool="first", input=data),
                StepSpec(tool="second"),
                StepSpec(tool="third"),
            ]
            if sleep:
                steps[1] = StepSpec(tool="second", input={**data, "sleep": sleep})
            body = msgspec.json.encode(TaskSubmit(task_id=task_id, steps=steps))
            return await js.publish_async(
                NAMES.submit_subject, body, headers={Header.MSG_ID: task_id}
            )
        body = msgspec.json.encode(data)
        return await js.publish_async(BASE_STEPS[0], body, headers={Header.MSG_ID: f"{task_id}.0"})

    async def throughput(self, system: str, tasks: int, size: int) -> float:
        """W1: seconds from the first submit until every task completed."""
        nc, completions = await self._connect(system)
        completions.expected = tasks
        run = uuid.uuid4().hex[:8]
        started = time.perf_counter()
        acks = [
            await self._submit(nc, system, f"w1-{run}-{i}", payload(size, i)) for i in range(tasks)
        ]
        await asyncio.gather(*acks)
        await asyncio.wait_for(completions.all_done.wait(), timeout=600)
        elapsed = time.perf_counter() - started
        await nc.close()
        return elapsed

    async def fan_out(self, branches: int, sleep: float) -> float:
        """W4: one task whose first step is `branches` parallel branches of a `sleep` s
        tool, then one step: seconds from submit to completed."""
        nc, completions = await self._connect("tether")
        task_id = f"w4-{uuid.uuid4().hex[:8]}"
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        completions.waiters[task_id] = waiter
        group = [StepSpec(tool="second", input={"n": b, "sleep": sleep}) for b in range(branches)]
        steps = [StepSpec(parallel=group), StepSpec(tool="third")]
        body = msgspec.json.encode(TaskSubmit(task_id=task_id, steps=steps))
        started = time.perf_counter()
        await nc.jetstream().publish(NAMES.submit_subject, body, headers={Header.MSG_ID: task_id})
        finished = await asyncio.wait_for(waiter, timeout=120)
        await nc.close()
        return finished - started

    async def growth(self, turns: int, at: list[int]) -> dict[str, float]:
        """W5: one dynamic task of `turns` steps, each appending the next. Every write of
        the task to JetStream is a publish this client also sees (KV puts, events, work),
        so the bytes each step writes are counted on the wire, per step."""
        nc = await nats.connect(self.url)
        task_id = f"w5-{uuid.uuid4().hex[:8]}"
        written: Counter[int] = Counter()
        record_bytes: dict[int, int] = {}
        done = asyncio.Event()

        async def record_write(msg: Any) -> None:
            record = msgspec.json.decode(msg.data)
            step = record["current_step"] - 1  # the write that completed this step
            written[step] += len(msg.data)
            record_bytes[step] = len(msg.data)
            if record["status"] == "completed":
                done.set()

        async def step_write(msg: Any) -> None:
            written[msgspec.json.decode(msg.data).get("step") or 0] += len(msg.data)

        async def checkpoint_write(msg: Any) -> None:
            written[int(msg.subject.rsplit(".", 1)[-1])] += len(msg.data)

        await nc.subscribe(f"$KV.{NAMES.tasks_bucket}.{task_id}", cb=record_write)
        await nc.subscribe(f"$KV.{NAMES.checkpoints_bucket}.{task_id}.*", cb=checkpoint_write)
        await nc.subscribe(NAMES.status_subject(task_id), cb=step_write)
        await nc.subscribe(NAMES.work_subject("grow"), cb=step_write)
        await nc.flush()
        spec = StepSpec(tool="grow", input={"turn": 0, "until": turns})
        body = msgspec.json.encode(TaskSubmit(task_id=task_id, steps=[spec]))
        await nc.jetstream().publish(NAMES.submit_subject, body, headers={Header.MSG_ID: task_id})
        await asyncio.wait_for(done.wait(), timeout=300)
        await nc.close()
        figures = {f"bytes_at_step_{k}": float(written[k]) for k in at}
        figures |= {f"record_bytes_at_step_{k}": float(record_bytes[k]) for k in at}
        figures["step_500_vs_step_10"] = written[at[-1]] / written[at[0]]
        return figures

    async def latency(self, system: str, tasks: int) -> list[float]:
        """W2: submit-to-completed seen by the client, one task at a time (ms)."""
        nc, completions = await self._connect(system)
        run = uuid.uuid4().hex[:8]
        samples = []
        for i in range(tasks):
            task_id = f"w2-{run}-{i}"
            waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            completions.waiters[task_id] = waiter
            started = time.perf_counter()
            await (await self._submit(nc, system, task_id, payload(200, i)))
            finished = await asyncio.wait_for(waiter, timeout=30)
            samples.append((finished - started) * 1000)
        await nc.close()
        return samples


async def crash_recovery(url: str, tasks: int, executions: Path) -> dict[str, float]:
    """W3: SIGKILL the worker ~1 s in, start a fresh one; count re-runs."""
    bench = Bench(url)
    env = {"BENCH_EXECUTIONS": str(executions)}
    node = Node("worker", url, 20, env)
    nc, completions = await bench._connect("tether")
    completions.expected = tasks
    run = uuid.uuid4().hex[:8]
    ids = [f"w3-{run}-{i}" for i in range(tasks)]
    await asyncio.gather(
        *[await bench._submit(nc, "tether", t, payload(200, 0), sleep=0.2) for t in ids]
    )
    await asyncio.sleep(1.0)  # the scenario: the crash comes about a second in
    node.kill()
    stored = await stored_steps(await Store.open(nc), ids)
    done_at_kill = {(task_id, str(step)) for task_id, step in stored}
    restarted = time.perf_counter()
    fresh = Node("worker", url, 20, env)
    try:
        await asyncio.wait_for(completions.all_done.wait(), timeout=120)
        recovery = time.perf_counter() - restarted
    finally:
        fresh.stop()
        await nc.close()
    counts = Counter(
        tuple(line.split()) for line in executions.read_text().splitlines() if run in line
    )
    rerun = {key for key, n in counts.items() if n > 1}
    return {
        "completed": float(len(completions.done) == tasks),
        "reruns": float(len(rerun)),
        "checkpointed_reruns": float(len(rerun & done_at_kill)),
        "recovery_s": recovery,
    }


async def main(args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        NatsServer(Path(tmp) / "nats") as server,
    ):
        url = server.url
        await provision_baseline(url)
        bench = Bench(url)
        print(environment(), flush=True)

        base_w1, base_w2 = Result("W1 throughput", "baseline"), Result("W2 latency", "baseline")
        node = Node("baseline", url, args.concurrency)
        for _ in range(args.runs):
            with CpuTime(server.pid, [node]) as cpu:
                seconds = await bench.throughput("baseline", args.tasks, 200)
            base_w1.add(tasks_per_s=args.tasks / seconds, steps_per_s=3 * args.tasks / seconds)
            base_w1.add(**cpu.per_task(args.tasks))
            samples = await bench.latency("baseline", args.latency_tasks)
            base_w2.add(p50_ms=_pct(samples, 50), p99_ms=_pct(samples, 99))
        node.stop()
        results += [base_w1, base_w2]

        dispatcher = Node("dispatcher", url, args.concurrency)  # its own process, as deployed
        for processes in args.processes:
            for size in [200, 100, 100 * 1024] if processes == 1 else [200]:
                workers = f"{processes} worker{'s' if processes > 1 else ''}"
                w1 = Result(f"W1 throughput ({workers}, {_size(size)})", "tether")
                nodes = [Node("worker", url, args.concurrency) for _ in range(processes)]
                for _ in range(args.runs):
                    with CpuTime(server.pid, nodes, dispatcher) as cpu:
                        seconds = await bench.throughput("tether", args.tasks, size)
                    w1.add(tasks_per_s=args.tasks / seconds, steps_per_s=3 * args.tasks / seconds)
                    w1.add(**cpu.per_task(args.tasks))
                w1.add(peak_mb=max(n.peak_memory_mb() for n in nodes))
                if processes == 1 and size == 200:
                    w2 = Result("W2 latency", "tether")
                    for _ in range(args.runs):
                        samples = await bench.latency("tether", args.latency_tasks)
                        w2.add(p50_ms=_pct(samples, 50), p99_ms=_pct(samples, 99))
                    results.append(w2)
                for n in nodes:
                    n.stop()
                results.append(w1)
                print(f"  {w1.workload}: {w1.median('tasks_per_s'):.0f} tasks/s", flush=True)

        w4 = Result(f"W4 fan-out ({args.branches} branches of 50 ms, 1 worker)", "tether")
        node = Node("worker", url, max(args.concurrency, args.branches))
        for _ in range(args.runs):
            seconds = await bench.fan_out(args.branches, FAN_OUT_SLEEP)
            overhead_ms = (seconds - FAN_OUT_SLEEP) * 1000
            w4.add(wall_ms=seconds * 1000, overhead_per_branch_ms=overhead_ms / args.branches)
        node.stop()
        results.append(w4)

        w5 = Result(f"W5 a {GROWTH_TURNS}-step dynamic task (each step adds the next)", "tether")
        node = Node("worker", url, args.concurrency)
        for _ in range(args.runs):
            w5.add(**await bench.growth(GROWTH_TURNS, GROWTH_SAMPLES))
        node.stop()
        results.append(w5)

        results += await agent_results(url, args.runs)
        w8 = Result(f"W8 first page of a filtered list, {args.list_tasks:,} tasks", "tether")
        w8.add(**await listing_figures(url, args.list_tasks))
        results.append(w8)

        w3 = Result("W3 crash recovery", "tether")
        for run in range(args.runs):
            w3.add(
                **await crash_recovery(url, args.crash_tasks, Path(tmp) / f"executions-{run}.log")
            )
        dispatcher.stop()
        results.append(w3)
    report(results, base_w1, base_w2, args.out)
    return results


async def agent_results(url: str, runs: int) -> list[Result]:
    """W6 and W7 (see tests/bench/agents.py)."""
    w6 = Result(f"W6 a {LONG_TURNS}-turn agent (a tool call per turn)", "tether")
    w7 = Result(f"W7 a streamed answer ({STREAM_WORDS} tokens)", "tether")
    long_runs, stream_runs = await agent_workloads(url, runs)
    for figures in long_runs:
        w6.add(**figures)
    for figures in stream_runs:
        w7.add(**figures)
    return [w6, w7]


def _pct(samples: list[float], pct: int) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def environment() -> str:
    from importlib.metadata import version as package_version

    version = subprocess.run(
        [_server_binary(), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"environment: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"nats-py {package_version('nats-py')}, msgspec {msgspec.__version__}, {version}, "
        f"{platform.platform()}"
    )


def _server_binary() -> str:
    from tether.nats.server import find_nats_server

    return find_nats_server()


def report(results: list[Result], base_w1: Result, base_w2: Result, out: Path | None) -> None:
    base_tps, base_p50 = base_w1.median("tasks_per_s"), base_w2.median("p50_ms")
    lines = [
        "| workload | system | median | spread (min–max) | vs baseline |",
        "| --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for key in result.metrics:
            ratio = ""
            if key == "tasks_per_s" and result.system == "tether":
                ratio = f"{result.median(key) / base_tps:.0%} of baseline"
            if key.startswith("cpu_ms_per_task") and "200 B" in result.workload:
                base = base_w1.metrics.get(key)
                if base:
                    ratio = f"{result.median(key) / statistics.median(base):.2f}× baseline"
            if key == "p50_ms" and result.system == "tether":
                ratio = f"{result.median(key) / base_p50:.2f}× baseline"
            lines.append(
                f"| {result.workload} | {result.system} | {key} = {result.median(key):.4g} "
                f"| {result.spread(key)} | {ratio} |"
            )
    table = "\n".join(lines)
    print("\n" + table)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.md").write_text(environment() + "\n\n" + table + "\n")
        with (out / "bench.jsonl").open("w") as jsonl:
            for result in results:
                jsonl.write(
                    json.dumps(
                        {
                            "workload": result.workload,
                            "system": result.system,
                            "metrics": result.metrics,
                        }
                    )
                    + "\n"
                )
        print(f"\nwrote {out / 'bench.md'} and {out / 'bench.jsonl'}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000, help="W1 tasks")
    parser.add_argument("--latency-tasks", type=int, default=200, help="W2 tasks")
    parser.add_argument("--crash-tasks", type=int, default=200, help="W3 tasks")
    parser.add_argument("--list-tasks", type=int, default=100_000, help="W8 tasks in the store")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="in-flight steps per tool and process"
    )
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--branches", type=int, default=100, help="W4 parallel branches")
    parser.add_argument(
        "--out", type=Path, default=None, help="directory for bench.md and bench.jsonl"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
