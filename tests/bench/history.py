"""Each `just bench` run's figures, kept per commit, and how they compare with the last
run of another commit: a regression shows in the run of the commit that made it.

A run is one file, `tests/bench/history/<date>-<commit>.jsonl`: a first line with the
commit, the date, the machine (and its load while the bench ran) and the settings, then a
line per result with every run's values. Files, not one growing log, so that two branches
that both ran the bench merge without a conflict.

Figures from a shared or busy machine move by tens of percent, so every comparison is
also made against the bare loop measured in the same run (`ratio to the bare loop`):
a build that got slower moves that ratio, a machine that got busier mostly does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HISTORY = Path(__file__).parent / "history"
COMPARED = {
    "W1 throughput": "tasks_per_s",
    "W1 throughput (1 worker, 200 B)": "tasks_per_s",
    "W2 latency": "p50_ms",
    "W2 latency (SDK submit)": "p50_ms",
}
"""The figures compared with the previous commit's: workload → metric."""
WORSE_BY = 0.10
"""A ratio to the bare loop worse by more than this is flagged."""
HIGHER_IS_BETTER = {"tasks_per_s"}


@dataclass(frozen=True)
class Run:
    header: dict[str, Any]
    results: dict[tuple[str, str], dict[str, list[float]]]
    """(workload, system) → metric → values."""

    def median(self, workload: str, system: str, metric: str) -> float | None:
        values = self.results.get((workload, system), {}).get(metric)
        if not values:
            return None
        ordered = sorted(values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def commit(root: Path) -> tuple[str, bool]:
    """The short commit of `root`'s checkout, and whether the code measured differs."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    # the code measured: Tether, and the processes the bench runs (not its own report)
    measured = ("services", "tests/bench/nodes.py", "tests/bench/agents.py", "pyproject.toml")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *measured)
    return sha, bool(changed)


def header(root: Path, machine: str, settings: dict[str, Any], load: list[float]) -> dict[str, Any]:
    sha, dirty = commit(root)
    return {
        "commit": sha,
        "dirty": dirty,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine,
        "cpus": os.cpu_count(),
        "load": {"before": load, "after": list(os.getloadavg())},
        "settings": settings,
    }


def save(head: dict[str, Any], results: list[dict[str, Any]], directory: Path = HISTORY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{head['date'][:10]}-{head['commit']}{'-dirty' if head['dirty'] else ''}"
    path = directory / f"{name}.jsonl"
    number = 2
    while path.exists():  # the same commit run again that day: a file of its own
        path = directory / f"{name}-{number}.jsonl"
        number += 1
    with path.open("w") as out:
        out.write(json.dumps({"kind": "run", **head}) + "\n")
        for result in results:
            out.write(json.dumps({"kind": "result", **result}) + "\n")
    return path


def load(path: Path) -> Run:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    head = next(line for line in lines if line.get("kind") == "run")
    results = {
        (line["workload"], line["system"]): line["metrics"]
        for line in lines
        if line.get("kind") == "result"
    }
    return Run(head, results)


def previous(current: dict[str, Any], directory: Path = HISTORY) -> Run | None:
    """The latest run kept of another commit (or of this one before its changes) that
    measured any figure compared here."""
    runs = []
    for path in directory.glob("*.jsonl"):
        try:
            run = load(path)
        except (OSError, ValueError, StopIteration, KeyError):
            continue
        same = (run.header["commit"], run.header["dirty"]) == (
            current["commit"],
            current["dirty"],
        )
        if not same and any((w, "tether") in run.results for w in COMPARED):
            runs.append(run)
    return max(runs, key=lambda run: str(run.header["date"]), default=None)


def compare(now: Run, before: Run) -> list[str]:
    """Lines comparing `now`'s figures with `before`'s, each also as a ratio to the bare
    loop of its own run; a ratio worse by more than `WORSE_BY` is flagged."""
    when = f"{before.header['commit']}{'+changes' if before.header['dirty'] else ''}"
    lines = [f"against {when} ({before.header['date']}, load {_load(before)}):"]
    for workload, metric in COMPARED.items():
        mine, theirs = (
            now.median(workload, "tether", metric),
            before.median(workload, "tether", metric),
        )
        if mine is None or theirs is None:
            continue
        base = workload.split(" (")[0]
        line = f"  {workload} {metric}: {mine:.4g} (was {theirs:.4g}, {_change(mine, theirs)})"
        bare_now, bare_then = (
            now.median(base, "baseline", metric),
            before.median(base, "baseline", metric),
        )
        if bare_now and bare_then:
            ratio_now, ratio_then = mine / bare_now, theirs / bare_then
            line += f"; to the bare loop {ratio_now:.2f}× (was {ratio_then:.2f}×)"
            worse = ratio_now < ratio_then if metric in HIGHER_IS_BETTER else ratio_now > ratio_then
            if worse and abs(ratio_now / ratio_then - 1) > WORSE_BY:
                line += "  <- WORSE: a regression, or a noisy run (run it again)"
        lines.append(line)
    return lines


def _change(now: float, before: float) -> str:
    return f"{(now / before - 1):+.0%}" if before else "n/a"


def _load(run: Run) -> str:
    before = run.header.get("load", {}).get("before") or []
    return f"{before[0]:.2f}" if before else "unknown"
