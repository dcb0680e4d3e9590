"""Scenario (f): `wait_runs` runs each waiting for a person's approval. While they all
wait (`wait_hold_s`), what the server exchanges per second, the CPU and memory of the
server and the worker; then every run approved at once, and the time until all ended."""

from __future__ import annotations

import time
from typing import Any

from tests.bench.peers import metrics
from tests.bench.peers.harness import Settings, _first_error, run_client
from tests.bench.peers.stacks import Stack
from tests.bench.peers.usage import Sampler

PLAN_TURNS = 2
"""Each run: a `get_weather` call, then the answer (see the report for where it waits)."""


async def waiting(stack: Stack, settings: Settings) -> dict[str, Any]:
    if stack.worker is None:
        return {"note": "no durable wait: a run waiting in memory is lost with its process"}
    marks: dict[str, Any] = {}

    def on_event(line: dict[str, Any]) -> None:
        if line["event"] == "started":
            marks["started"] = line["t"]
        elif line["event"] == "waiting":
            marks["waiting"], marks["failed_to_start"] = line["t"], line.get("failed", 0)
            marks["count0"] = stack.server_messages()
            marks["sampler"] = Sampler(
                {"server": stack.server_pids, "worker": stack.worker_pids}
            ).__enter__()
            marks["t0"] = time.monotonic()
        elif line["event"] == "approving":
            marks["sampler"].__exit__(None, None, None)
            marks["t1"] = time.monotonic()
            marks["count1"] = stack.server_messages()
            marks["approving"] = line["t"]
        elif line["event"] == "end":
            marks["end"] = line["t"]

    client = await run_client(
        stack,
        settings,
        tag=f"{stack.name}-wait",
        runs=settings.wait_runs,
        concurrency=settings.load_concurrency,
        turns=PLAN_TURNS,
        wait_s=settings.wait_hold_s,
        on_event=on_event,
    )
    good = metrics.ok_runs(client.runs, settings.words)
    figures: dict[str, Any] = {
        "runs": len(client.runs),
        "ok": len(good),
        "failure": client.failure or _first_error(client.runs),
        "failed_to_start": marks.get("failed_to_start"),
        "counted": stack.counted,
    }
    if "waiting" in marks:
        figures["all_waiting_after_s"] = marks["waiting"] - marks["started"]
    if "t1" in marks:
        held = marks["t1"] - marks["t0"]
        sampler: Sampler = marks["sampler"]
        figures["held_s"] = held
        for group in ("server", "worker"):
            figures[f"cpu_pct_{group}"] = sampler.cpu[group] / held * 100
            figures[f"rss_mb_{group}"] = sampler.peak_mb[group]
        if marks["count0"] is not None and marks["count1"] is not None:
            figures["messages_per_s"] = (marks["count1"] - marks["count0"]) / held
    if "end" in marks and "approving" in marks:
        figures["resume_all_s"] = marks["end"] - marks["approving"]
    return figures
