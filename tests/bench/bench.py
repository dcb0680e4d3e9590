"""`just bench`: Tether against a raw JetStream hand-off pipeline, measured in the same run.

Starts its own nats-server (file storage) and node processes, runs each workload
`--runs` times, prints medians with their spread and ratios to the baseline (or the
target), and writes JSON lines and a Markdown table with `--out`. `--only w4` runs one
workload (or several: `--only w1 w2`). Every run is kept in tests/bench/history/ with its
commit, date, machine and settings, and compared with the last run of another commit
(`--no-history` keeps nothing; see tests/bench/history.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
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

from tests.bench import history, holding
from tests.bench.agents import LONG_TURNS, STREAM_WORDS
from tests.bench.agents import measure as agent_workloads
from tests.bench.listing import measure as listing_figures
from tests.bench.nodes import BASE_BUCKET, BASE_STEPS, provision_baseline
from tests.bench.processes import ROOT, CpuTime, Node
from tether import Client, NatsConfig, NatsServer
from tether.nats.server import find_nats_server
from tether.nats.store import Store
from tether.schemas.names import DEFAULT_NAMES as NAMES
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.testing.progress import stored_steps

PLOT = Path(__file__).parent / "performance.png"
WORKLOADS = ["w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9", "w10"]
GROWTH_TURNS = 502
GROWTH_SAMPLES = [10, 100, 500]
"""W6 samples steps 10, 100 and 500 (not the last step, which writes no checkpoint)."""
FAN_OUT_SLEEP = 0.05
"""W5's branch time: the ideal wall time of the whole fan-out, with no overhead."""
LIVE_STEP_S = 8.0
"""W3 with a live second worker: each held step's wait (long enough to be held, and
killed, well before it ends)."""
LIVE_SETTLE_S = 3.0
"""... and how long the second worker is up before the kill: a fleet's workers have been
up a while (a worker believes "no responders" once its connection is steady for 2 s)."""


@dataclass
class Result:
    workload: str
    system: str
    metrics: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    """A metric's target, shown where a baseline ratio would be."""

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.metrics.setdefault(key, []).append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.metrics[key])

    def spread(self, key: str) -> str:
        values = self.metrics[key]
        return f"{_figure(min(values))}–{_figure(max(values))}"


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
    """The task id of an end notice on `tether.ended.<task_id>.completed`."""
    return str(msg.subject.split(".")[2])


def baseline_completion(msg: Any) -> str | None:
    return str(msg.subject.rsplit(".", 1)[-1])


def payload(size: int, index: int) -> dict[str, Any]:
    return {"n": index, "text": "x" * max(0, size - 30)}


class Bench:
    def __init__(self, url: str, client: Client | None = None) -> None:
        self.url = url
        self.client = client
        """For `sdk` submits: `Client.submit`, which records each task itself."""

    async def _connect(self, system: str) -> tuple[Any, Completions]:
        nc = await nats.connect(self.url)
        if system in ("tether", "sdk"):
            completions = Completions(tether_completion)
            await nc.subscribe(NAMES.ended_subject("*", "completed"), cb=completions.on_message)
        else:
            completions = Completions(baseline_completion)
            await nc.subscribe(f"$KV.{BASE_BUCKET}.*", cb=completions.on_message)
        await nc.flush()
        return nc, completions

    async def _submit(
        self, nc: Any, system: str, task_id: str, data: dict[str, Any], sleep: float = 0
    ) -> Any:
        js = nc.jetstream()
        if system in ("tether", "sdk"):
            steps = [
                StepSpec(tool="first", input=data),
                StepSpec(tool="second"),
                StepSpec(tool="third"),
            ]
            if sleep:
                steps[1] = StepSpec(tool="second", input={**data, "sleep": sleep})
            if system == "sdk":  # recorded and handed off by the client itself
                return asyncio.ensure_future(self.client.submit(steps, task_id=task_id))
            body = msgspec.json.encode(TaskSubmit(task_id=task_id, steps=steps))
            return await js.publish_async(
                NAMES.submit_subject(task_id), body, headers={Header.MSG_ID: task_id}
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
        """W5: one task whose first step is `branches` parallel branches of a `sleep` s
        tool, then one step: seconds from submit to completed."""
        nc, completions = await self._connect("tether")
        task_id = f"w5-{uuid.uuid4().hex[:8]}"
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        completions.waiters[task_id] = waiter
        group = [StepSpec(tool="second", input={"n": b, "sleep": sleep}) for b in range(branches)]
        steps = [StepSpec(parallel=group), StepSpec(tool="third")]
        body = msgspec.json.encode(TaskSubmit(task_id=task_id, steps=steps))
        started = time.perf_counter()
        await nc.jetstream().publish(
            NAMES.submit_subject(task_id), body, headers={Header.MSG_ID: task_id}
        )
        finished = await asyncio.wait_for(waiter, timeout=120)
        await nc.close()
        return finished - started

    async def growth(self, turns: int, at: list[int]) -> dict[str, float]:
        """W6: one dynamic task of `turns` steps, each appending the next. Every write of
        the task to JetStream is a publish this client also sees (KV puts, events, work),
        so the bytes each step writes are counted on the wire, per step."""
        nc = await nats.connect(self.url)
        task_id = f"w6-{uuid.uuid4().hex[:8]}"
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
        await nc.jetstream().publish(
            NAMES.submit_subject(task_id), body, headers={Header.MSG_ID: task_id}
        )
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
    only = set(args.only or WORKLOADS)
    load = list(os.getloadavg())
    results: list[Result] = []
    baseline: dict[str, Result] = {}
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        NatsServer(Path(tmp) / "nats", monitor=True) as server,
    ):
        url = server.url
        bench = Bench(url)
        print(environment(), flush=True)
        if only & {"w1", "w2"}:
            await provision_baseline(url)
            baseline = await baseline_results(bench, server.pid, args, only)
            results += baseline.values()
        dispatcher = Node("dispatcher", url, args.concurrency)  # its own process, as deployed
        client = Client(NatsConfig(url=url))
        await client.connect()
        bench.client = client
        try:
            if "w1" in only:
                results += await throughput_results(bench, server.pid, dispatcher, args)
            if "w2" in only:
                worker = Node("worker", url, args.concurrency)
                results.append(await latency_result(bench, "tether", args))
                results.append(await latency_result(bench, "sdk", args))
                worker.stop()
            results += await shaped_results(bench, url, args, only)
            if "w3" in only:
                results += await crash_results(url, args, Path(tmp))
            if "w4" in only:
                results += await holding_results(server, args)
        finally:
            await client.close()
            dispatcher.stop()
    report(results, baseline, args.out)
    if args.history is not None:
        keep(results, args, load)
    if args.plot is not None:
        plot(results, baseline, args.plot)
    return results


def keep(results: list[Result], args: argparse.Namespace, load: list[float]) -> None:
    """This run's figures into the history, and how they compare with the last run of
    another commit (see tests/bench/history.py)."""
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    head = history.header(ROOT, environment(), settings, load)
    rows = [{"workload": r.workload, "system": r.system, "metrics": r.metrics} for r in results]
    path = history.save(head, rows, args.history)
    print(f"\nkept in {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    before = history.previous(head, args.history)
    if before is None:
        print("no earlier run of another commit is kept to compare with")
        return
    print("\n".join(history.compare(history.load(path), before)))


async def baseline_results(
    bench: Bench, server: int | None, args: argparse.Namespace, only: set[str]
) -> dict[str, Result]:
    """W1 and W2 of the bare JetStream pipeline, keyed by workload."""
    w1, w2 = Result("W1 throughput", "baseline"), Result("W2 latency", "baseline")
    node = Node("baseline", bench.url, args.concurrency)
    for _ in range(args.runs):
        if "w1" in only:
            with CpuTime(server, [node]) as cpu:
                seconds = await bench.throughput("baseline", args.tasks, 200)
            w1.add(tasks_per_s=args.tasks / seconds, steps_per_s=3 * args.tasks / seconds)
            w1.add(**cpu.per_task(args.tasks))
        if "w2" in only:
            samples = await bench.latency("baseline", args.latency_tasks)
            w2.add(p50_ms=_pct(samples, 50), p99_ms=_pct(samples, 99))
    node.stop()
    return {r.workload: r for r in (w1, w2) if r.metrics}


async def throughput_results(
    bench: Bench, server: int | None, dispatcher: Node, args: argparse.Namespace
) -> list[Result]:
    """W1 with 1, 2 or 4 worker processes (`--processes`), and three sizes with one."""
    results = []
    for processes in args.processes:
        sizes = [200, 100, 100 * 1024] if processes == 1 else [200]
        for size, system in [(s, "tether") for s in sizes] + [(200, "sdk")] * (processes == 1):
            workers = f"{processes} worker{'s' if processes > 1 else ''}"
            how = ", SDK submit" if system == "sdk" else ""
            w1 = Result(f"W1 throughput ({workers}, {_size(size)}{how})", "tether")
            nodes = [Node("worker", bench.url, args.concurrency) for _ in range(processes)]
            for _ in range(args.runs):
                with CpuTime(server, nodes, dispatcher) as cpu:
                    seconds = await bench.throughput(system, args.tasks, size)
                w1.add(tasks_per_s=args.tasks / seconds, steps_per_s=3 * args.tasks / seconds)
                w1.add(**cpu.per_task(args.tasks))
            w1.add(peak_mb=max(n.peak_memory_mb() for n in nodes))
            for n in nodes:
                n.stop()
            results.append(w1)
            print(f"  {w1.workload}: {w1.median('tasks_per_s'):.0f} tasks/s", flush=True)
    return results


async def latency_result(bench: Bench, system: str, args: argparse.Namespace) -> Result:
    """W2: raw JSON on `tether.submit` (through the dispatcher), or `sdk` (`Client.submit`)."""
    label = "W2 latency (SDK submit)" if system == "sdk" else "W2 latency"
    w2 = Result(label, "tether")
    for _ in range(args.runs):
        samples = await bench.latency(system, args.latency_tasks)
        w2.add(p50_ms=_pct(samples, 50), p99_ms=_pct(samples, 99))
    return w2


async def shaped_results(
    bench: Bench, url: str, args: argparse.Namespace, only: set[str]
) -> list[Result]:
    """W5-W10: fan-out, growth, agents, listing, a LangGraph thread."""
    results: list[Result] = []
    if "w5" in only:
        results.append(await fan_out_result(bench, args))
    if "w6" in only:
        results.append(await growth_result(bench, args))
    if only & {"w7", "w8"}:
        results += await agent_results(url, args.runs)
    if "w9" in only:
        w9 = Result(f"W9 first page of a filtered list, {args.list_tasks:,} tasks", "tether")
        w9.add(**await listing_figures(url, args.list_tasks))
        results.append(w9)
    if "w10" in only:
        results += await graph_growth_results(url, args.runs)
    return results


async def graph_growth_results(url: str, runs: int) -> list[Result]:
    """W10: one LangGraph thread of 200 super-steps on `JetStreamSaver`, per channel kind:
    bytes a super-step adds and the time to read the latest checkpoint, early and late
    (see tests/bench/langgraph.py; needs the `langgraph` extra)."""
    from tests.bench import langgraph

    merged = langgraph.medians([await langgraph.measure(url) for _ in range(runs)])
    results = []
    first, last = str(langgraph.SAMPLES[0]), str(langgraph.SAMPLES[-1])
    for variant in merged:
        result = Result(f"W10 a LangGraph thread, {variant['variant']}", "tether")
        steps = variant["steps"]
        result.add(
            **{
                f"bytes_per_step_at_{first}": steps[first]["added_bytes_window"],
                f"bytes_per_step_at_{last}": steps[last]["added_bytes_window"],
                f"get_tuple_ms_at_{first}": steps[first]["get_tuple_ms"],
                f"get_tuple_ms_at_{last}": steps[last]["get_tuple_ms"],
                "bytes_per_step_growth": variant["step200_over_step10"]["added_bytes_window"],
            }
        )
        results.append(result)
    return results


async def fan_out_result(bench: Bench, args: argparse.Namespace) -> Result:
    w5 = Result(f"W5 fan-out ({args.branches} branches of 50 ms, 1 worker)", "tether")
    node = Node("worker", bench.url, max(args.concurrency, args.branches))
    for _ in range(args.runs):
        seconds = await bench.fan_out(args.branches, FAN_OUT_SLEEP)
        overhead_ms = (seconds - FAN_OUT_SLEEP) * 1000
        w5.add(wall_ms=seconds * 1000, overhead_per_branch_ms=overhead_ms / args.branches)
    node.stop()
    return w5


async def growth_result(bench: Bench, args: argparse.Namespace) -> Result:
    w6 = Result(f"W6 a {GROWTH_TURNS}-step dynamic task (each step adds the next)", "tether")
    node = Node("worker", bench.url, args.concurrency)
    for _ in range(args.runs):
        w6.add(**await bench.growth(GROWTH_TURNS, GROWTH_SAMPLES))
    node.stop()
    return w6


async def crash_results(url: str, args: argparse.Namespace, tmp: Path) -> list[Result]:
    """W3 with a fresh worker, and with a live second worker beside the killed one: the
    time from the SIGKILL until each of its held steps started again elsewhere."""
    w3 = Result("W3 crash recovery", "tether")
    for run in range(args.runs):
        w3.add(**await crash_recovery(url, args.crash_tasks, tmp / f"executions-{run}.log"))
    live = Result(
        f"W3 recovery ({args.live_steps} held steps, SIGKILL 1 of 2 workers)",
        "tether",
        notes={"p50_rerun_s": "target ≤ 0.5"},
    )
    for _ in range(args.live_runs):
        figures = await holding.recovery(
            url, args.live_steps, LIVE_STEP_S, LIVE_SETTLE_S, "W3 recovery"
        )
        live.add(**figures)
    return [w3, live]


async def holding_results(server: NatsServer, args: argparse.Namespace) -> list[Result]:
    """W4 (see tests/bench/holding.py): once each, as a run takes most of a minute."""
    w4 = Result(
        f"W4 holding ({args.hold_steps:,} steps of {args.hold_seconds:g} s, 1 worker)",
        "tether",
        notes=holding.HOLDING_TARGETS,
    )
    w4.add(**await holding.holding(server, args.hold_steps, args.hold_seconds, args.hold_window))
    w4r = Result(
        f"W4 recovery ({args.recovery_steps:,} steps of {args.recovery_seconds:g} s, "
        "SIGKILL 1 of 2 workers)",
        "tether",
        notes=holding.RECOVERY_TARGETS,
    )
    w4r.add(**await holding.recovery(server.url, args.recovery_steps, args.recovery_seconds))
    return [w4, w4r]


async def agent_results(url: str, runs: int) -> list[Result]:
    """W7 and W8 (see tests/bench/agents.py)."""
    w7 = Result(f"W7 a {LONG_TURNS}-turn agent (a tool call per turn)", "tether")
    w8 = Result(f"W8 a streamed answer ({STREAM_WORDS} tokens)", "tether")
    long_runs, stream_runs = await agent_workloads(url, runs)
    for figures in long_runs:
        w7.add(**figures)
    for figures in stream_runs:
        w8.add(**figures)
    return [w7, w8]


def _pct(samples: list[float], pct: int) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def _figure(value: float) -> str:
    """Four significant digits, but a count (10,000 tasks) in full."""
    return f"{value:.0f}" if float(value).is_integer() and abs(value) < 1e12 else f"{value:.4g}"


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def environment() -> str:
    from importlib.metadata import version as package_version

    version = subprocess.run(
        [find_nats_server(), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"environment: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"nats-py {package_version('nats-py')}, msgspec {msgspec.__version__}, {version}, "
        f"{platform.platform()}"
    )


def report(results: list[Result], baseline: dict[str, Result], out: Path | None) -> None:
    lines = [
        "| workload | system | median | spread (min–max) | vs baseline or target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for key in result.metrics:
            note = _versus(result, key, baseline) or result.notes.get(key, "")
            lines.append(
                f"| {result.workload} | {result.system} | {key} = {_figure(result.median(key))} "
                f"| {result.spread(key)} | {note} |"
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


def plot(results: list[Result], baseline: dict[str, Result], path: Path) -> None:
    """Throughput and latency side by side with the bare loop (W1 with one worker, W2)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    def bars(baseline_label: str, prefix: str, key: str) -> dict[str, float]:
        found = {"bare loop": baseline[baseline_label].median(key)}
        for result in results:
            if result.workload.startswith(prefix):
                how = "SDK" if "SDK" in result.workload else "raw"
                found[f"Tether\n({how} submit)"] = result.median(key)
        return found

    throughput = bars("W1 throughput", "W1 throughput (1 worker, 200 B", "tasks_per_s")
    latency = bars("W2 latency", "W2 latency", "p50_ms")
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(9, 3.6))
    for axes, values, title, unit in (
        (left, throughput, "W1: 1,000 three-step tasks at once", "tasks/s (higher is better)"),
        (right, latency, "W2: one task at a time, p50", "ms (lower is better)"),
    ):
        colours = ["#9aa0a6" if name == "bare loop" else "#2b6cb0" for name in values]
        shown = axes.bar(list(values), list(values.values()), color=colours)
        axes.bar_label(shown, fmt="%.0f" if "tasks" in unit else "%.1f")
        axes.set_title(title, fontsize=10)
        axes.set_ylabel(unit)
    when = time.strftime("%Y-%m-%d", time.gmtime())
    machine = environment().removeprefix("environment: ").split(", Linux")[0]
    figure.suptitle(f"{when}: {machine}", fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def _versus(result: Result, key: str, baseline: dict[str, Result]) -> str:
    """A Tether figure against the baseline's (empty without one)."""
    w1, w2 = baseline.get("W1 throughput"), baseline.get("W2 latency")
    if result.system != "tether":
        return ""
    if key == "tasks_per_s" and w1 is not None:
        return f"{result.median(key) / w1.median(key):.0%} of baseline"
    if key.startswith("cpu_ms_per_task") and "200 B" in result.workload and w1 is not None:
        base = w1.metrics.get(key)
        if base:
            return f"{result.median(key) / statistics.median(base):.2f}× baseline"
    if key == "p50_ms" and w2 is not None:
        return f"{result.median(key) / w2.median(key):.2f}× baseline"
    return ""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000, help="W1 tasks")
    parser.add_argument("--latency-tasks", type=int, default=200, help="W2 tasks")
    parser.add_argument("--crash-tasks", type=int, default=200, help="W3 tasks")
    parser.add_argument(
        "--live-runs", type=int, default=10, help="W3 with a live second worker: kills"
    )
    parser.add_argument(
        "--live-steps", type=int, default=10, help="W3 with a live second worker: held steps"
    )
    parser.add_argument("--list-tasks", type=int, default=100_000, help="W9 tasks in the store")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="in-flight steps per tool and process"
    )
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--branches", type=int, default=100, help="W5 parallel branches")
    parser.add_argument("--hold-steps", type=int, default=10_000, help="W4 holding: steps")
    parser.add_argument(
        "--hold-seconds", type=float, default=40.0, help="W4 holding: how long each step waits"
    )
    parser.add_argument(
        "--hold-window", type=float, default=20.0, help="W4 holding: the measured window (s)"
    )
    parser.add_argument("--recovery-steps", type=int, default=1000, help="W4 recovery: steps")
    parser.add_argument(
        "--recovery-seconds", type=float, default=15.0, help="W4 recovery: each step's wait"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        metavar="W",
        help=f"run only these workloads ({', '.join(WORKLOADS)}); default: all",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="directory for bench.md and bench.jsonl"
    )
    parser.add_argument(
        "--history",
        type=Path,
        default=history.HISTORY,
        help="where each run's figures are kept, by date and commit, and compared with the "
        f"last run of another commit (default {history.HISTORY.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--no-history", dest="history", action="store_const", const=None, help="keep nothing"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        nargs="?",
        const=PLOT,
        default=None,
        help=f"draw W1 and W2 against the baseline into a PNG (default {PLOT}; needs "
        "matplotlib: pip install -e '.[bench]')",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
