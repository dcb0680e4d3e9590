"""`just chaos`: tasks on the 3-node R3 cluster of deploy/ while the leader of the work
stream, then a follower, is SIGKILLed and restarted. Every task must complete, no
checkpointed step may run again, and the status index (`tether ls`, the counts) must
list each task under its record's status; the report states the stall around each kill.

    python -m tests.chaos_runs.cluster [--tasks 1000] [--workers 3] [--down 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos_runs import executions, installation, runs, stalls, tasks
from tests.chaos_runs.processes import INDEX_REPAIR_EVERY, Roles, stopped_on_exit
from tests.chaos_runs.report import lost_table, say, table, verdict
from tests.chaos_runs.servers import Cluster, Node
from tests.chaos_runs.streams import leaders
from tests.chaos_runs.tools import EXECUTIONS_ENV
from tether import Client, NatsConfig, TaskRecord, TaskStatus
from tether.nats.layout import expected_streams

SUBMITS_AT_ONCE = 16
POLL = 0.5


@dataclass(frozen=True)
class Options:
    tasks: int
    workers: int
    concurrency: int
    sleep: float
    sleepy_every: int
    leader_at: float
    follower_at: float
    down: float
    deadline: float
    stuck_after: float
    keep: bool


def parse(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="just chaos", description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--tasks", type=int, default=1000, help="tasks to run (default 1000)")
    add("--workers", type=int, default=3, help="worker processes (default 3)")
    add("--concurrency", type=int, default=32, help="steps per tool per worker (default 32)")
    add("--sleep", type=float, default=0.3, help="seconds a sleepy middle step takes")
    add("--sleepy-every", type=int, default=2, help="every Nth task's middle step sleeps")
    add("--leader-at", type=float, default=0.25, help="kill the leader at this share done")
    add("--follower-at", type=float, default=0.6, help="kill a follower at this share done")
    add("--down", type=float, default=5.0, help="seconds a killed node stays down")
    add("--deadline", type=float, default=600.0, help="seconds the last tasks may take")
    add("--stuck-after", type=float, default=120.0, help="give up when none completes this long")
    add("--keep", action="store_true", help="keep the run's directory (logs, stores)")
    return Options(**vars(parser.parse_args(argv)))


def plan(i: int, options: Options) -> list[dict[str, Any]]:
    """Three steps; every `sleepy_every`-th task's middle step sleeps, so that steps are
    in flight when a node dies."""
    pause = options.sleep if i % options.sleepy_every == 0 else 0.0
    return [
        {"tool": "fetch", "input": {"n": i, "sleep": pause}},
        {"tool": "think"},
        {"tool": "write"},
    ]


@dataclass
class Run:
    options: Options
    base: Path
    cluster: Cluster
    roles: Roles
    client: Client
    task_ids: list[str]
    started: float = field(default_factory=time.time)
    code: str = field(default_factory=runs.code_version)
    kills: list[stalls.Kill] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)

    @property
    def executions(self) -> Path:
        return self.base / "executions.log"


async def submit_all(run: Run) -> None:
    gate = asyncio.Semaphore(SUBMITS_AT_ONCE)

    async def one(i: int, task_id: str) -> None:
        async with gate:
            await tasks.submit(run.client, plan(i, run.options), task_id)

    await asyncio.gather(*(one(i, t) for i, t in enumerate(run.task_ids)))
    say(f"all {len(run.task_ids)} tasks submitted")


async def wait_done(run: Run, share: float) -> int:
    """Wait until `share` of the tasks completed, restarting any role that died."""
    return await tasks.wait_finished(
        run.client._store,
        run.task_ids,
        [TaskStatus.COMPLETED],
        share,
        run.options.stuck_after,
        lambda: installation.restart_exited(run.roles, run.exits),
    )


async def work_leader(run: Run) -> tuple[str, dict[str, str]]:
    """The node leading the work stream, and the leader of every stream."""
    names = run.client._store.names
    while True:
        found = await tasks.retrying(
            lambda: leaders(run.client._store.js, expected_streams(names)), "leaders"
        )
        if found[names.work_stream]:
            return found[names.work_stream], found
        await asyncio.sleep(POLL)


def victim(run: Run, role: str, leader: str) -> Node:
    if role == "leader":
        return run.cluster.node(leader)
    earlier = {kill.node for kill in run.kills}
    followers = [n for n in run.cluster.nodes if n.name != leader]
    return next((n for n in followers if n.name not in earlier), followers[0])


async def kill_and_restart(run: Run, role: str) -> None:
    leader, led = await work_leader(run)
    node = victim(run, role, leader)
    also = sum(who == node.name for who in led.values())
    say(f"SIGKILL {node.name} ({role} of the work stream; it led {also}/{len(led)} streams)")
    killed_at = time.time()
    node.kill()
    await asyncio.sleep(run.options.down)
    restarted_at = time.time()
    node.start()
    say(f"restarted {node.name}")
    took = await run.cluster.wait_healthy([node], timeout=180)
    say(f"{node.name} healthy {took:.1f}s after its restart")
    run.kills.append(stalls.Kill(node.name, role, killed_at, restarted_at, time.time()))


async def chaos(run: Run) -> None:
    submitting = asyncio.create_task(submit_all(run))
    try:
        await wait_done(run, run.options.leader_at)
        await kill_and_restart(run, "leader")
        await wait_done(run, run.options.follower_at)
        await kill_and_restart(run, "follower")
        await submitting
        await asyncio.wait_for(wait_done(run, 1.0), run.options.deadline)
    except (tasks.Stuck, TimeoutError) as exc:
        say(f"stopped waiting: {exc or 'past the deadline'}")
    finally:
        submitting.cancel()


@dataclass(frozen=True)
class Outcome:
    records: dict[str, TaskRecord | None]
    reruns: list[executions.Execution]
    repeated: int
    ran: list[executions.Execution]
    started: float
    misindexed: dict[str, str]
    """Tasks whose status index rows disagree with their records (what `tether ls` and
    the counts would show) once the dispatcher had time to repair them, and the rows
    the index has."""
    moves_lost: int
    """Tasks whose index rows disagreed with their records 10 s after the end (a row
    move lost with a failover: the dispatcher's repair is what brings them back)."""

    @property
    def completion_times(self) -> list[float]:
        return sorted(r.updated_at.timestamp() for r in self.completed)

    @property
    def wall(self) -> float:
        """From the first submission to the last completion."""
        times = self.completion_times
        return times[-1] - self.started if times else 0.0

    @property
    def completed(self) -> list[TaskRecord]:
        found = (r for r in self.records.values() if r is not None)
        return [r for r in found if r.status is TaskStatus.COMPLETED]

    @property
    def lost(self) -> dict[str, str]:
        """Tasks that did not complete, and what they are instead."""
        return {
            task_id: "no record" if record is None else record.status.value
            for task_id, record in self.records.items()
            if record is None or record.status is not TaskStatus.COMPLETED
        }


async def outcome(run: Run) -> Outcome:
    store = run.client._store
    records = await tasks.read_records(store, run.task_ids)
    ran = executions.read(run.executions)
    stored = await tasks.stored_at(store, [r for r in records.values() if r is not None])
    reruns = executions.checkpointed_reruns(ran, stored)
    repeated = sum(executions.repeats(ran, {}).values())
    moves_lost = len(await tasks.index_agrees(store, records))
    repaired = INDEX_REPAIR_EVERY * 2 + 10
    misindexed = await tasks.index_agrees(store, records, repaired) if moves_lost else {}
    return Outcome(records, reruns, repeated, ran, run.started, misindexed, moves_lost)


def report(run: Run, result: Outcome) -> int:
    options, total = run.options, len(run.task_ids)
    print(f"\nCluster chaos: {total} tasks x 3 steps, {options.workers} workers, 1 dispatcher,")
    print(f"3-node JetStream cluster at R3 ({', '.join(n.name for n in run.cluster.nodes)})")
    print(runs.code_line(run.code) + "\n")
    print(table(["", "value"], _summary(run, result)))
    print()
    print(_kills(run, result))
    if result.lost:
        print(f"\n{len(result.lost)} tasks did not complete; the first ten:")
        print(lost_table(result.records, result.lost, result.ran, run.started))
    failures = _failures(run, result)
    print(f"\n{verdict(failures)}")
    return 1 if failures else 0


def _summary(run: Run, result: Outcome) -> list[list[object]]:
    return [
        ["tasks completed", f"{len(result.completed)}/{len(run.task_ids)}"],
        ["lost (not completed)", len(result.lost)],
        ["checkpointed-step re-runs", len(result.reruns)],
        ["index rows wrong 10 s after the end (moves lost)", result.moves_lost],
        ["... and once the dispatcher repaired them", len(result.misindexed)],
        ["step executions", len(result.ran)],
        ["in-flight steps run again after a kill (allowed)", result.repeated],
        ["role processes that exited on their own", len(run.exits)],
        ["wall time, first submission to last completion (s)", round(result.wall, 1)],
    ]


def _kills(run: Run, result: Outcome) -> str:
    times = result.completion_times
    rows = [_kill_row(run, s) for s in stalls.stalls(times, run.kills)]
    headers = ["killed", "of TETHER_WORK", "at (s)", "down (s)", "healthy after restart (s)"]
    headers += ["first completion after kill (s)", "stall: longest gap (s)"]
    before = run.kills[0].killed_at if run.kills else time.time()
    calm = stalls.baseline(times, before)
    return table(headers, rows) + f"\nlongest gap between completions before any kill: {calm:.2f}s"


def _kill_row(run: Run, stall: stalls.Stall) -> list[object]:
    kill = stall.kill
    return [
        kill.node,
        kill.role,
        round(kill.killed_at - run.started, 1),
        round(kill.restarted_at - kill.killed_at, 1),
        round(kill.healthy_at - kill.restarted_at, 1),
        None if stall.first_after is None else round(stall.first_after, 2),
        round(stall.longest_gap, 2),
    ]


def _failures(run: Run, result: Outcome) -> list[str]:
    failures = []
    if result.lost:
        sample = ", ".join(f"{t} ({why})" for t, why in list(result.lost.items())[:10])
        failures.append(f"{len(result.lost)} tasks did not complete: {sample}")
    if result.misindexed:
        sample = ", ".join(f"{t} ({rows})" for t, rows in list(result.misindexed.items())[:10])
        failures.append(f"{len(result.misindexed)} tasks misindexed (rows: {sample})")
    for e in result.reruns[:10]:
        failures.append(f"checkpointed step re-ran: {e.task_id} step {e.step} attempt {e.attempt}")
    if len(run.kills) < 2:
        failures.append(f"only {len(run.kills)} of 2 kills happened")
    last = result.completion_times[-1] if result.completed else 0.0
    for kill in run.kills:
        if kill.killed_at > last:
            failures.append(f"{kill.node} was killed after the last completion: run more --tasks")
    return failures


async def main(options: Options, base: Path) -> int:
    cluster = Cluster.from_deploy(base)
    roles = Roles(cluster.url, base, replicas=3, concurrency=options.concurrency)
    roles.env[EXECUTIONS_ENV] = str(base / "executions.log")
    with stopped_on_exit(roles.stop, cluster.stop):
        cluster.start()
        await cluster.wait_healthy()
        config = NatsConfig(url=cluster.url, replicas=3, name="chaos-run")
        await installation.provisioned(config)
        installation.start_roles(roles, options.workers)
        async with Client(config) as client:
            await installation.registered(client)
            say(f"cluster, 1 dispatcher and {options.workers} workers up; logs in {base}")
            ids = [f"chaos-{i}" for i in range(options.tasks)]
            run = Run(options, base, cluster, roles, client, ids)
            await chaos(run)
            return report(run, await outcome(run))


def cli(argv: list[str]) -> int:
    options = parse(argv)
    return runs.run(lambda base: main(options, base), "chaos", options.keep)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
