"""W2 as a user outside measures it, on two or more commits alternately in one session:
the regression check of issue 43 (`just bench` compares with the last kept run of another
commit; this compares builds side by side, on the same machine at the same moment).

For each commit (a git ref, or `.` for this checkout as it is), a detached worktree; then,
round after round and commit after commit, a fresh nats-server, the CLI's `tether
dispatcher` and `tether worker tests.bench.nodes:app` of that commit's code, and tasks of
three steps submitted one at a time as raw JSON on the submit subject, each finished when
its record in the tasks bucket says `completed`. Alternating spreads a busy moment of the
machine over every commit rather than on one.

    python -m tests.bench.alternate 890c70b . [--rounds 3] [--tasks 300] [--hops]

`--hops` adds a round per commit with a wiretap on every subject: when each message of a
task (its work messages, acks, pull requests, events, record writes) goes by, as a median
time after the submit. The tap costs each message a copy, so those rounds are not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WARM_UP = 20
"""Tasks run first and not counted (connections, consumers, caches)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.alternate", description=__doc__)
    parser.add_argument("refs", nargs="*", default=["890c70b", "."], help="commits; . = this")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=300, help="tasks counted per round")
    parser.add_argument("--hops", action="store_true", help="and each message's time")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="tether-alternate-"))
    trees = {ref: checkout(ref, scratch) for ref in args.refs}
    p50s: dict[str, list[float]] = {ref: [] for ref in trees}
    try:
        for round_ in range(1, args.rounds + 1):
            for ref, tree in trees.items():
                p50 = measure_in(tree, args.tasks)
                p50s[ref].append(p50)
                print(f"round {round_}  {ref:>12}: W2 p50 {p50:.2f} ms", flush=True)
        for ref, tree in trees.items() if args.hops else ():
            print(f"\n{ref}: when each message went by, ms after the submit (median)")
            print(run_in(tree, min(args.tasks, 100), hops=True)["hops"])
    finally:
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
        shutil.rmtree(scratch, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"\nmedian of {args.rounds} rounds, {args.tasks} tasks each (load {load:.2f}):")
    for ref, values in p50s.items():
        each = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {ref:>12}: {statistics.median(values):.2f} ms  ({each})")


def checkout(ref: str, scratch: Path) -> Path:
    if ref == ".":
        return ROOT
    tree = scratch / ref.replace("/", "_")
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-f", str(tree), ref],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return tree


def measure_in(tree: Path, tasks: int) -> float:
    """One round in a process importing `tree`'s code: the p50 it prints."""
    return float(run_in(tree, tasks)["p50_ms"])


def run_in(tree: Path, tasks: int, hops: bool = False) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": f"{tree}/services:{tree}"}
    mode = "--hops" if hops else "--measure"
    done = subprocess.run(
        [sys.executable, __file__, mode, str(tree), str(tasks)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the round in {tree} failed:\n{done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _round(tree: Path, tasks: int, tap: Tap | None = None) -> float:
    """A nats-server, and the CLI's dispatcher and worker of `tree`'s code; W2's p50."""
    from tether.nats.server import find_nats_server

    port, data = _free_port(), tempfile.mkdtemp()
    url = f"nats://127.0.0.1:{port}"
    command = [find_nats_server(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", data]
    cli = [sys.executable, "-c", "from tether.cli import main; main()"]
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for node in (["dispatcher"], ["worker", "tests.bench.nodes:app"]):
            processes.append(
                subprocess.Popen(
                    [*cli, *node, "--nats", url],
                    cwd=tree,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        return asyncio.run(_latency(url, tasks, tap))
    finally:
        for process in processes:
            process.terminate()
            process.wait()
        shutil.rmtree(data, ignore_errors=True)


async def _latency(url: str, tasks: int, tap: Tap | None) -> float:
    import nats

    from tether.schemas.names import Names

    names = Names()
    nc = await _connect(nats, url)
    await _registered(nc, names.tools_bucket, 3)  # a submit names only known tools
    if tap is not None:
        await nc.subscribe(">", cb=tap.seen)  # type: ignore[attr-defined]
    run, samples = uuid.uuid4().hex[:6], []
    for i in range(WARM_UP + tasks):
        task_id = f"alt{run}{i}"
        subject = names.submit_subject
        subject = subject if isinstance(subject, str) else subject(task_id)  # (older: one)
        if tap is not None:
            tap.begin(task_id)
        took = await _one(nc, names.tasks_bucket, subject, task_id, i, 60 if i == 0 else 30)
        if i >= WARM_UP:
            samples.append(took)
            if tap is not None:
                tap.keep()
    await nc.close()  # type: ignore[attr-defined]
    return statistics.median(samples)


async def _connect(nats: object, url: str) -> object:
    deadline = time.monotonic() + 10
    while True:
        try:
            return await nats.connect(url, max_reconnect_attempts=0)  # type: ignore[attr-defined]
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _registered(nc: object, bucket: str, tools: int) -> None:
    js = nc.jetstream()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if len(await (await js.key_value(bucket)).keys()) >= tools:
                return
        except Exception:  # the bucket is not made yet, or has no keys
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("the worker registered no tools in 60 s")


async def _one(nc: object, bucket: str, subject: str, task_id: str, i: int, wait: float) -> float:
    """Submit one task and wait for its record to say it completed: ms."""
    finished: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def seen(msg: object) -> None:
        try:
            status = json.loads(msg.data).get("status")  # type: ignore[attr-defined]
        except ValueError:
            return
        if status == "completed" and not finished.done():
            finished.set_result(time.perf_counter())

    watch = await nc.subscribe(f"$KV.{bucket}.{task_id}", cb=seen)  # type: ignore[attr-defined]
    await nc.flush()  # type: ignore[attr-defined]
    steps = [{"tool": "first", "input": {"i": i, "pad": "x" * 180}}, {"tool": "second"}]
    body = json.dumps({"task_id": task_id, "steps": [*steps, {"tool": "third"}]}).encode()
    started = time.perf_counter()
    await nc.publish(subject, body)  # type: ignore[attr-defined]
    ended = await asyncio.wait_for(finished, wait)
    await watch.unsubscribe()
    return (ended - started) * 1000


class Tap:
    """Every message while one task is in flight (one at a time: all are its own), by
    subject with the task's id, sequence numbers and inboxes taken out."""

    def __init__(self) -> None:
        self._task, self._started = "", 0.0
        self._now: list[tuple[float, str]] = []
        self._kept: dict[tuple[str, int], list[float]] = {}

    def begin(self, task_id: str) -> None:
        self._task, self._started, self._now = task_id, time.perf_counter(), []

    async def seen(self, msg: object) -> None:
        subject: str = msg.subject  # type: ignore[attr-defined]
        if self._started and not subject.startswith("_INBOX"):
            self._now.append((time.perf_counter() - self._started, self._pattern(subject)))

    def _pattern(self, subject: str) -> str:
        tokens = subject.replace(self._task, "<task>").split(".")
        keep = 4 if tokens[:2] == ["$JS", "ACK"] else 7 if tokens[0] == "$JS" else len(tokens)
        return ".".join(tokens[:keep])

    def keep(self) -> None:
        counts: dict[str, int] = {}
        for offset, pattern in self._now:
            counts[pattern] = counts.get(pattern, 0) + 1
            self._kept.setdefault((pattern, counts[pattern]), []).append(offset * 1000)

    def timeline(self, tasks: int) -> str:
        rows = [
            (statistics.median(offsets), pattern, n)
            for (pattern, n), offsets in self._kept.items()
            if len(offsets) >= tasks // 2  # in most tasks: not a beat or a sweep
        ]
        return "\n".join(f"  {ms:7.2f}  {pattern} #{n}" for ms, pattern, n in sorted(rows))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in ("--measure", "--hops"):
        tap = Tap() if sys.argv[1] == "--hops" else None
        p50 = _round(Path(sys.argv[2]), int(sys.argv[3]), tap)
        hops = tap.timeline(int(sys.argv[3])) if tap else ""
        print(json.dumps({"p50_ms": p50, "hops": hops}))
    else:
        main()
