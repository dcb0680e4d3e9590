"""`python -m tests.bench.peers [--only tether,temporal] [--quick] [--out DIR]`: the same
agent on bare Pydantic AI, Tether (two ways), Temporal, DBOS and Restate, measured side by
side; writes results.jsonl, report.md and chart.png into the output folder."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench.peers import harness, report, waiting
from tests.bench.peers.install import PEERS, install, versions
from tests.bench.peers.servers import ROOT, ModelServer, remove
from tests.bench.peers.stacks import STACKS, Stack

SCENARIOS = ("latency", "load", "crash_tool", "crash_stream", "growth", "waiting")


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    load = os.getloadavg()
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores ({cpu}), {system}, load {load[0]:.1f} at start"


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT
    )
    return done.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


async def scenario(name: str, stack: Stack, settings: harness.Settings) -> dict[str, Any]:
    match name:
        case "latency":
            return await harness.latency(stack, settings)
        case "load":
            return await harness.load(stack, settings)
        case "crash_tool":
            return await harness.crash(stack, settings, "tool")
        case "crash_stream":
            return await harness.crash(stack, settings, "stream")
        case "waiting":
            return await waiting.waiting(stack, settings)
        case _:
            agent = getattr(stack, "agent", None)
            if agent == "bench_pai":  # the same agent, without Pydantic AI's 50-request limit
                stack.agent = "bench_pai_long"  # type: ignore[attr-defined]
            try:
                return await harness.growth(stack, settings)
            finally:
                if agent is not None:
                    stack.agent = agent  # type: ignore[attr-defined]


async def measure(
    name: str,
    settings: harness.Settings,
    folder: Path,
    scenarios: list[str],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Every scenario on one peer, its servers started and stopped around them."""
    folder.mkdir(parents=True)
    model = ModelServer(folder, settings.turn_ms, settings.token_ms)
    stack = STACKS[name](folder, model)
    peer: dict[str, Any] = {"name": name, "label": stack.label, "live_stream": stack.live_stream}
    try:
        started = time.monotonic()
        await asyncio.to_thread(stack.start)
        peer["startup_s"] = time.monotonic() - started
        for key in scenarios:
            started = time.monotonic()
            try:
                peer[key] = await scenario(key, stack, settings)
            except Exception as error:  # the table says it failed, and the run goes on
                peer[key] = {"error": f"{type(error).__name__}: {error}"[:300]}
                (folder / f"{key}.traceback").write_text(traceback.format_exc())
            say(f"  {name} {key}: {time.monotonic() - started:.0f}s {_brief(peer[key])}")
    except Exception as error:
        peer["error"] = f"{type(error).__name__}: {error}"[:300]
        say(f"  {name}: could not start: {peer['error']}")
        for key in scenarios:
            peer.setdefault(key, {"error": f"the stack did not start: {peer['error']}"})
    finally:
        stack.stop()
        model.stop()
    return peer


def _brief(section: dict[str, Any]) -> str:
    keys = ("error", "failure", "note", "ttft_ms", "runs_per_s", "moved_again_s", "late_vs_early")
    keys += ("messages_per_s", "resume_all_s")
    return json.dumps({k: section[k] for k in keys if section.get(k) is not None}, default=str)[
        :300
    ]


def draw(out: Path, peers: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    chart = PEERS["chart"]
    try:
        install(chart, out / "install.log")
    except RuntimeError as error:
        say(f"no chart: matplotlib could not be installed ({error})")
        return
    source = out / "chart-input.json"
    source.write_text(json.dumps(peers))
    script = Path(__file__).parent / "chart.py"
    command = [str(chart.python), str(script), str(source), str(out / "chart.png")]
    done = subprocess.run(command, capture_output=True, text=True)
    source.unlink()
    say(
        f"chart: {out / 'chart.png'}" if done.returncode == 0 else f"no chart: {done.stderr[-500:]}"
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers", description=__doc__)
    parser.add_argument(
        "--only", default=",".join(STACKS), help=f"comma-separated, of {', '.join(STACKS)}"
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=", ".join(SCENARIOS))
    parser.add_argument(
        "--quick", action="store_true", help="fewer runs: a check that it all works"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs/bench/peers")
    parser.add_argument(
        "--keep", action="store_true", help="keep the servers' folders (logs, data)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = [n for n in args.only.split(",") if n]
    scenarios = [s for s in args.scenarios.split(",") if s]
    settings = harness.QUICK if args.quick else harness.Settings()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - began:6.0f}s] {text}", flush=True)

    found: dict[str, Any] = {}
    for name in names:
        if name.startswith("tether"):
            found["tether"] = {"tether": commit()}
            continue
        peer = install(PEERS[name], out / "install.log")
        found[name] = versions(peer)
    meta = {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "machine": machine(),
        "settings": dataclasses.asdict(settings) | {"load": settings.load_runs},
        "versions": found,
        "load": settings.load_runs,
        "wait_runs": settings.wait_runs,
    }
    say(f"machine: {meta['machine']}")
    say(f"versions: {found}")
    say(f"settings: {meta['settings']}")
    work = Path(tempfile.mkdtemp(prefix="tether-peers-"))
    peers = []
    with (out / "results.jsonl").open("w") as results:
        results.write(json.dumps({"meta": meta}) + "\n")
        for name in names:
            say(f"{name}: starting")
            peer = asyncio.run(measure(name, settings, work / name, scenarios, say))
            peers.append(peer)
            results.write(json.dumps(peer, default=str) + "\n")
            results.flush()
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    meta["machine"] += f", load {load} (1, 5, 15 min) at the end"
    meta["wall_s"] = round(time.monotonic() - began)
    say(f"machine: {meta['machine']}")
    lines = [{"meta": meta}, *peers]  # again, with the end's load and the wall time
    (out / "results.jsonl").write_text("".join(json.dumps(x, default=str) + "\n" for x in lines))
    (out / "report.md").write_text(report.markdown(meta, peers))
    draw(out, peers, say)
    if not args.keep:
        remove(work)
    else:
        say(f"servers' folders kept in {work}")
    say(f"report: {out / 'report.md'}")
    print(report.markdown(meta, peers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
