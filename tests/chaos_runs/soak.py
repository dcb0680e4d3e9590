"""`just soak`: a steady mix of tasks (short, sleeping, fan-outs, retries, cancels, input
waits) for N minutes while workers are SIGKILLed at random. Every task must end as its
kind says, no checkpointed step may run again, every long-lived process's memory must
stay flat and no stream may grow past its limits.

    python -m tests.chaos_runs.soak [--minutes 10] [--rate 3] [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos_runs import executions, installation, mix, runs, tasks
from tests.chaos_runs.memory import Growth, Memory
from tests.chaos_runs.processes import Roles, stopped_on_exit
from tests.chaos_runs.report import lost_table, say, table, verdict
from tests.chaos_runs.servers import Cluster, Load
from tests.chaos_runs.streams import Snapshot, snapshot
from tests.chaos_runs.tools import APP, EXECUTIONS_ENV
from tether import Client, NatsConfig, TaskRecord, TaskStatus

TERMINAL = [TaskStatus.COMPLETED, TaskStatus.CANCELLED, TaskStatus.FAILED]
KEPT = "worker-1"
"""The worker --keep-one never kills, so that one worker's memory is followed for the
whole run (with three workers and a kill every 30 s, none would live through it)."""
LIVED = 180.0
"""A process counts as long-lived (its memory judged) after this many seconds."""


@dataclass(frozen=True)
class Options:
    minutes: float
    rate: float
    workers: int
    concurrency: int
    kill_min: float
    kill_max: float
    keep_one: bool
    cluster: bool
    sample_every: float
    drain: float
    stuck_after: float
    seed: int
    keep: bool


def parse(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="just soak", description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--minutes", type=float, default=10.0, help="how long to submit tasks (default 10)")
    add("--rate", type=float, default=3.0, help="tasks submitted per second (default 3)")
    add("--workers", type=int, default=3, help="worker processes (default 3)")
    add("--concurrency", type=int, default=32, help="steps per tool per worker (default 32)")
    add("--kill-min", type=float, default=20.0, help="shortest time between worker kills")
    add("--kill-max", type=float, default=40.0, help="longest time between worker kills")
    add("--keep-one", action=argparse.BooleanOptionalAction, default=True, help=KEPT_HELP)
    add("--cluster", action="store_true", help="the 3-node R3 cluster instead of one server")
    add("--sample-every", type=float, default=60.0, help="seconds between RSS samples")
    add("--drain", type=float, default=300.0, help="seconds the last tasks may take")
    add("--stuck-after", type=float, default=120.0, help="give up when none ends this long")
    add("--seed", type=int, default=1, help="seed of the mix and of the kills")
    add("--keep", action="store_true", help="keep the run's directory (logs, stores)")
    return Options(**vars(parser.parse_args(argv)))


KEPT_HELP = f"never kill {KEPT}, so one worker lives through the run (default: on)"


@dataclass
class Run:
    options: Options
    base: Path
    servers: Cluster
    roles: Roles
    client: Client
    rng: random.Random
    memory: Memory = field(default_factory=Memory)
    loads: list[Load] = field(default_factory=list)
    kinds: dict[str, mix.Kind] = field(default_factory=dict)
    drivers: set[asyncio.Task[None]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    workers_started: int = 0
    started: float = field(default_factory=time.time)
    code: str = field(default_factory=runs.code_version)

    @property
    def executions(self) -> Path:
        return self.base / "executions.log"

    def pids(self) -> dict[str, int]:
        alive = {role.label: role.pid for role in self.roles.started if role.alive}
        return {**self.servers.pids(), **alive}


async def submit_for(run: Run, seconds: float) -> None:
    """Start one task of a random kind every 1/rate seconds for `seconds`."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        kind = mix.pick(run.rng)
        task_id = f"soak-{n}-{kind.value}"
        run.kinds[task_id] = kind
        driver = asyncio.create_task(_drive(run, kind, task_id, n))
        run.drivers.add(driver)
        driver.add_done_callback(run.drivers.discard)
        n += 1
        await asyncio.sleep(1 / run.options.rate)
    say(f"submitted {n} tasks")


async def _drive(run: Run, kind: mix.Kind, task_id: str, n: int) -> None:
    try:
        await mix.drive(run.client, kind, task_id, mix.plan(kind, n, run.rng))
    except Exception as exc:
        run.problems.append(f"{task_id}: {exc!r}")
        say(run.problems[-1])


async def kill_workers(run: Run) -> None:
    """Every kill-min..kill-max seconds, SIGKILL a random worker and start a new one."""
    while True:
        await asyncio.sleep(run.rng.uniform(run.options.kill_min, run.options.kill_max))
        installation.restart_exited(run.roles, run.exits)
        workers = [r for r in run.roles.started if r.label.startswith("worker")]
        victims = [r for r in workers if not (run.options.keep_one and r.label == KEPT)]
        victim = run.rng.choice(victims)
        run.roles.kill(victim)
        run.workers_started += 1
        label = f"worker-{run.workers_started}"
        run.roles.worker(APP, label)
        run.kills.append(victim.label)
        say(f"SIGKILL {victim.label}; started {label}")


async def sample_loads(run: Run) -> None:
    """The servers' connections, subscriptions and consumers, with every RSS sample."""
    while True:
        run.loads.append(await asyncio.to_thread(run.servers.load))
        await asyncio.sleep(run.options.sample_every)


async def soak(run: Run) -> None:
    background = [
        asyncio.create_task(kill_workers(run)),
        asyncio.create_task(run.memory.every(run.options.sample_every, run.pids)),
        asyncio.create_task(sample_loads(run)),
    ]
    try:
        await submit_for(run, run.options.minutes * 60)
        await asyncio.gather(*run.drivers)
        background[0].cancel()
        say("kills stopped; waiting for the last tasks")
        await asyncio.wait_for(_all_ended(run), run.options.drain)
    except (tasks.Stuck, TimeoutError) as exc:
        run.problems.append(f"stopped waiting for the last tasks: {exc or 'past --drain'}")
        say(run.problems[-1])
    finally:
        for task in background:
            task.cancel()
        run.memory.sample(run.pids())
        run.loads.append(await asyncio.to_thread(run.servers.load))


async def _all_ended(run: Run) -> None:
    await tasks.wait_finished(
        run.client._store,
        list(run.kinds),
        TERMINAL,
        stuck_after=run.options.stuck_after,
        tick=lambda: installation.restart_exited(run.roles, run.exits),
    )


@dataclass(frozen=True)
class Outcome:
    records: dict[str, TaskRecord | None]
    wrong: dict[str, str]
    """Tasks that did not end as their kind says, and how they are instead."""
    reruns: list[executions.Execution]
    repeated: int
    ran: list[executions.Execution]


async def outcome(run: Run) -> Outcome:
    store = run.client._store
    records = await tasks.read_records(store, run.kinds)
    wrong = {}
    for task_id, kind in run.kinds.items():
        record = records[task_id]
        if record is None or record.status is not mix.expected(kind):
            wrong[task_id] = "no record" if record is None else record.status.value
    ran = executions.read(run.executions)
    stored = await tasks.stored_at(store, [r for r in records.values() if r is not None])
    planned = {k: n for t, kind in run.kinds.items() for k, n in mix.planned_runs(kind, t).items()}
    repeated = sum(executions.repeats(ran, planned).values())
    return Outcome(records, wrong, executions.checkpointed_reruns(ran, stored), repeated, ran)


def report(run: Run, result: Outcome, start: Snapshot, end: Snapshot) -> int:
    options = run.options
    where = "3-node R3 cluster" if options.cluster else "one nats-server"
    print(f"\nSoak: {options.minutes:g} min at {options.rate:g} tasks/s on {where},")
    print(f"1 dispatcher, {options.workers} workers, a worker SIGKILLed every ", end="")
    print(f"{options.kill_min:g}-{options.kill_max:g} s")
    print(runs.code_line(run.code) + "\n")
    print(table(["kind", "submitted", "as expected", "expected"], _kinds(run, result)))
    print()
    print(table(["", "value"], _summary(run, result)))
    if result.wrong:
        print(f"\n{len(result.wrong)} tasks did not end as expected; the first ten:")
        print(lost_table(result.records, result.wrong, result.ran, run.started))
    print(f"\nMemory (RSS, MB; sampled every {options.sample_every:g} s)")
    growths = _growths(run)
    print(_memory(run, growths))
    print(_loads(run.loads))
    print("\nStreams (start -> end)")
    print(_streams(start, end))
    print(_workers_bucket(run, start, end))
    failures = _failures(run, result, growths, end)
    print(f"\n{verdict(failures)}")
    return 1 if failures else 0


def _kinds(run: Run, result: Outcome) -> list[list[object]]:
    submitted = Counter(run.kinds.values())
    bad = Counter(run.kinds[t] for t in result.wrong)
    return [
        [kind.value, submitted[kind], submitted[kind] - bad[kind], mix.expected(kind).value]
        for kind in mix.Kind
    ]


def _summary(run: Run, result: Outcome) -> list[list[object]]:
    return [
        ["tasks submitted", len(run.kinds)],
        ["lost or not as expected", len(result.wrong)],
        ["checkpointed-step re-runs", len(result.reruns)],
        ["step executions", len(result.ran)],
        ["in-flight steps run again after a kill (allowed)", result.repeated],
        ["workers SIGKILLed", len(run.kills)],
        ["role processes that exited on their own", len(run.exits)],
        ["problems driving tasks", len(run.problems)],
    ]


def _growths(run: Run) -> list[Growth]:
    """Every process alive at the end (the servers, the dispatcher, the workers)."""
    alive = set(run.pids())
    return [run.memory.growth(label) for label in run.memory.samples if label in alive]


def _memory(run: Run, growths: list[Growth]) -> str:
    rows: list[list[object]] = []
    for g in growths:
        judged = "yes" if g.flat else "NO"
        flat = judged if g.lived >= LIVED else "(short-lived)"
        row = [g.label, round(g.lived / 60, 1), g.start, g.warm, g.end, g.peak, flat]
        rows.append([*row, run.memory.series(g.label)])
    headers = ["process", "lived (min)", "start", "after 1 min", "end", "peak", "flat"]
    return table([*headers, "samples"], rows)


def _workers_bucket(run: Run, start: Snapshot, end: Snapshot) -> str:
    live = sum(r.label.startswith("worker") and r.alive for r in run.roles.started)
    line = f"workers bucket: {start.beats} -> {end.beats} worker beats for {live} live workers, "
    line += f"{start.held} -> {end.held} other keys"
    if end.beats > live:
        line += f"\n  note: {end.beats - live} beats of dead workers stay (one more key per crash)"
    return line


def _loads(loads: list[Load]) -> str:
    """The servers' load at each sample: growing subscriptions or consumers would be
    something a client forgot to close."""

    def series(values: list[int]) -> str:
        return " ".join(map(str, values))

    return "\n".join(
        [
            f"server connections:   {series([load.connections for load in loads])}",
            f"server subscriptions: {series([load.subscriptions for load in loads])}",
            f"server consumers:     {series([load.consumers for load in loads])}",
        ]
    )


def _streams(start: Snapshot, end: Snapshot) -> str:
    rows: list[list[object]] = []
    for name, last in end.sizes.items():
        first = start.sizes.get(name)
        msgs = f"{first.messages if first else '?'} -> {last.messages}"
        kib = f"{(first.bytes if first else 0) / 1024:.0f} -> {last.bytes / 1024:.0f}"
        over = "; ".join(last.over_limits()) or "within"
        rows.append([name, msgs, kib, last.limits(), over])
    return table(["stream", "messages", "KiB", "limits", "at end"], rows)


def _failures(run: Run, result: Outcome, growths: list[Growth], end: Snapshot) -> list[str]:
    return [
        *_task_failures(run, result),
        *run.problems[:10],
        *(
            f"{g.label}'s memory grew {g.grew:.0f} MB ({g.warm:.0f} -> {g.end:.0f})"
            for g in growths
            if g.lived >= LIVED and not g.flat
        ),
        *_stream_failures(end),
    ]


def _task_failures(run: Run, result: Outcome) -> list[str]:
    wrong = list(result.wrong.items())
    failures = [f"{t} ended {why}, not {mix.expected(run.kinds[t]).value}" for t, why in wrong[:10]]
    if len(wrong) > 10:
        failures.append(f"... and {len(wrong) - 10} more tasks not as expected")
    return failures + [
        f"checkpointed step re-ran: {e.task_id} step {e.step} attempt {e.attempt}"
        for e in result.reruns[:10]
    ]


def _stream_failures(end: Snapshot) -> list[str]:
    failures = []
    for size in end.sizes.values():
        failures += [f"{size.name}: {over}" for over in size.over_limits()]
        if size.work_queue and size.messages:
            failures.append(f"{size.name} holds {size.messages} messages after every task ended")
    return failures


def _servers(options: Options, base: Path) -> Cluster:
    return Cluster.from_deploy(base) if options.cluster else Cluster.single(base)


async def main(options: Options, base: Path) -> int:
    servers = _servers(options, base)
    replicas = 3 if options.cluster else 1
    roles = Roles(servers.url, base, replicas=replicas, concurrency=options.concurrency)
    roles.env[EXECUTIONS_ENV] = str(base / "executions.log")
    with stopped_on_exit(roles.stop, servers.stop):
        servers.start()
        await servers.wait_healthy()
        config = NatsConfig(url=servers.url, replicas=replicas, name="soak-run")
        await installation.provisioned(config)
        installation.start_roles(roles, options.workers)
        async with Client(config) as client:
            await installation.registered(client)
            say(f"1 dispatcher and {options.workers} workers up; logs in {base}")
            run = Run(options, base, servers, roles, client, random.Random(options.seed))
            run.workers_started = options.workers
            start = await tasks.retrying(lambda: snapshot(client._store), "streams")
            await soak(run)
            end = await tasks.retrying(lambda: snapshot(client._store), "streams")
            return report(run, await outcome(run), start, end)


def cli(argv: list[str]) -> int:
    options = parse(argv)
    return runs.run(lambda base: main(options, base), "soak", options.keep)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
