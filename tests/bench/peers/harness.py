"""The scenarios, run against one peer's stack: the client is a subprocess in the peer's
environment speaking JSON lines; the harness watches the model's and the tools' logs,
measures the processes and kills the worker where a crash scenario says."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.peers import metrics
from tests.bench.peers.model import answer
from tests.bench.peers.stacks import RUNNERS, Stack
from tests.bench.peers.usage import Sampler


@dataclass(frozen=True)
class Settings:
    """Every knob of a run, printed with the results."""

    turn_ms: float = 50.0
    token_ms: float = 5.0
    tool_ms: int = 10
    words: int = 20
    latency_runs: int = 40
    load_runs: int = 200
    load_concurrency: int = 200
    crash_tool_ms: int = 1500
    crash_words: int = 300
    growth_turns: int = 200
    wait_runs: int = 1000
    wait_hold_s: float = 20.0
    client_timeout_s: float = 600.0


QUICK = Settings(
    latency_runs=10,
    load_runs=50,
    load_concurrency=50,
    growth_turns=60,
    wait_runs=50,
    wait_hold_s=5.0,
    client_timeout_s=180.0,
)


WARM = 2
"""The latency client's first runs, not counted: a client's first run pays for its own
connections and imports (bare's, its model client's), which no later run does."""


@dataclass
class ClientRun:
    runs: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    failure: str | None = None


async def run_client(
    stack: Stack,
    settings: Settings,
    *,
    tag: str,
    runs: int = 1,
    concurrency: int = 1,
    turns: int = 3,
    tool_ms: int | None = None,
    words: int | None = None,
    on_started: Callable[[int], None] | None = None,
    on_end: Callable[[], None] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    wait_s: float = 0.0,
) -> ClientRun:
    """The peer's client for one scenario: its run lines, and when it started and ended."""
    command = stack.client_command()
    command += ["--runs", str(runs), "--concurrency", str(concurrency), "--turns", str(turns)]
    command += ["--tool-ms", str(settings.tool_ms if tool_ms is None else tool_ms)]
    command += ["--words", str(settings.words if words is None else words), "--tag", tag]
    command += ["--wait-s", str(wait_s)] if wait_s else []
    result = ClientRun()
    with (stack.folder / f"client-{tag}.log").open("ab") as errors:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            env=stack.env(),
            cwd=RUNNERS,
            limit=2**24,
        )
        try:
            await asyncio.wait_for(
                _read(process, result, on_started, on_end, on_event), settings.client_timeout_s
            )
        except TimeoutError:
            result.failure = f"the client did not finish within {settings.client_timeout_s:.0f}s"
            process.kill()
        await process.wait()
    if result.failure is None and len(result.runs) < runs:
        result.failure = (
            f"the client exited with {process.returncode} after {len(result.runs)} of {runs} runs"
        )
    return result


async def _read(
    process: asyncio.subprocess.Process,
    result: ClientRun,
    on_started: Callable[[int], None] | None,
    on_end: Callable[[], None] | None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    assert process.stdout is not None
    async for raw in process.stdout:
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a library's print: not ours
        if on_event:
            on_event(line)
        if line["event"] == "started":
            result.started = line["t"]
            if on_started:
                on_started(process.pid)
        elif line["event"] == "run":
            result.runs.append(line)
        elif line["event"] == "end":
            result.ended = line["t"]
            if on_end:
                on_end()


async def latency(stack: Stack, settings: Settings) -> dict[str, Any]:
    """Metric 1: one run at a time; time to first token and the gaps around each step."""
    await run_client(stack, settings, tag=f"{stack.name}-warm", runs=3)
    runs = settings.latency_runs + WARM
    client = await run_client(stack, settings, tag=f"{stack.name}-lat", runs=runs)
    client.runs = [r for r in client.runs if int(r["run"].rsplit("-", 1)[1]) >= WARM]
    good = metrics.ok_runs(client.runs, settings.words)
    ids = {r["run"] for r in good}
    gaps = metrics.gaps_ms(stack.model.requests, stack.tool_log, ids, turns=3)
    return {
        "runs": len(client.runs),
        "ok": len(good),
        "failure": client.failure or _first_error(client.runs),
        "ttft_ms": metrics.summary(metrics.ttft_ms(good)),
        "run_ms": metrics.summary([(r["done"] - r["submitted"]) * 1000 for r in good]),
        "model_to_tool_ms": metrics.summary(gaps["model_to_tool"]),
        "tool_to_model_ms": metrics.summary(gaps["tool_to_model"]),
        "ttft_samples_ms": metrics.ttft_ms(good),
    }


def _first_error(runs: list[dict[str, Any]]) -> str | None:
    return next((r["error"] or f"wrong text: {r['text'][:80]!r}" for r in runs if r["error"]), None)


async def load(stack: Stack, settings: Settings) -> dict[str, Any]:
    """Metric 2: `load_runs` runs, `load_concurrency` at once: runs/s, CPU per run, peak RSS."""
    holder: dict[str, Sampler] = {}

    def started(pid: int) -> None:
        groups = {"server": stack.server_pids, "worker": stack.worker_pids, "client": [pid]}
        holder["sampler"] = Sampler(groups).__enter__()

    def ended() -> None:
        holder["sampler"].__exit__(None, None, None)

    client = await run_client(
        stack,
        settings,
        tag=f"{stack.name}-load",
        runs=settings.load_runs,
        concurrency=settings.load_concurrency,
        on_started=started,
        on_end=ended,
    )
    good = metrics.ok_runs(client.runs, settings.words)
    sampler = holder.get("sampler")
    wall = client.ended - client.started if client.ended else None
    figures: dict[str, Any] = {
        "runs": len(client.runs),
        "ok": len(good),
        "failure": client.failure or _first_error(client.runs),
        "wall_s": wall,
        "runs_per_s": len(good) / wall if wall else None,
    }
    if sampler is not None and sampler.cpu and good:
        for group in ("server", "worker", "client"):
            used = sampler.cpu[group]  # negative if a process of the group was gone at the end
            figures[f"cpu_ms_per_run_{group}"] = used * 1000 / len(good) if used >= 0 else None
            figures[f"peak_rss_mb_{group}"] = sampler.peak_mb[group]
    return figures


async def crash(stack: Stack, settings: Settings, where: str) -> dict[str, Any]:
    """Metric 3: SIGKILL the worker mid-tool (the second tool) or mid-stream (the answer),
    start a new one at once, and see what runs again and what the client is shown."""
    if stack.worker is None:
        return {
            "note": "no worker to kill: the agent runs in the client's process, "
            "and a kill ends the run"
        }
    tag = f"{stack.name}-crash-{where}"
    run = f"{tag}-0"
    words = settings.crash_words if where == "stream" else settings.words
    tool_ms = settings.crash_tool_ms if where == "tool" else settings.tool_ms
    client = asyncio.ensure_future(
        run_client(stack, settings, tag=tag, tool_ms=tool_ms, words=words)
    )
    log, turn, phase = (
        (stack.tool_log, 1, "start") if where == "tool" else (stack.model.requests, 2, "first")
    )
    reached = await _wait_line(log, run, turn, phase, client)
    if reached is None:
        result = await client
        return {
            "failure": "the run never reached the kill point: "
            f"{result.failure or _first_error(result.runs)}"
        }
    await asyncio.sleep(0.3)
    killed = time.monotonic()
    stack.kill_worker()
    await asyncio.to_thread(stack.start_worker)
    ready = time.monotonic()
    result = await client
    return _after_crash(stack, result, run, words, killed, ready)


async def _wait_line(
    log: Path, run: str, turn: int, phase: str, client: asyncio.Future[ClientRun]
) -> dict[str, Any] | None:
    while not client.done():
        found = metrics.sent(metrics.read_lines(log), run, turn, phase)
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    return None


def _after_crash(
    stack: Stack, result: ClientRun, run: str, words: int, killed: float, ready: float
) -> dict[str, Any]:
    model = [x for x in metrics.read_lines(stack.model.requests) if x.get("run") == run]
    tools = [x for x in metrics.read_lines(stack.tool_log) if x.get("run") == run]
    calls = [x for x in model if x.get("phase") == "end"]
    starts = [x for x in tools if x.get("phase") == "start"]
    moved = [x["start"] for x in calls if x["start"] > killed] + [
        x["t"] for x in starts if x["t"] > killed
    ]
    finished_before = {
        (x["turn"]) for x in calls if not x.get("cut") and x.get("end", 1e18) < killed
    }
    tools_done_before = {x["turn"] for x in tools if x.get("phase") == "end" and x["t"] < killed}
    model_again = sum(1 for x in calls if x["turn"] in finished_before and x["start"] > killed)
    tools_again = sum(1 for x in starts if x["turn"] in tools_done_before and x["t"] > killed)
    line = result.runs[0] if result.runs else {}
    expected = answer(run, words)
    return {
        "failure": result.failure or line.get("error"),
        "moved_again_s": (min(moved) - killed) if moved else None,
        "worker_ready_s": ready - killed,
        "done_s": (line["done"] - killed) if line.get("done") else None,
        "finished_model_calls_sent_again": model_again,
        "finished_tool_calls_run_again": tools_again,
        "model_calls": len(calls),
        "tool_runs": len(starts),
        "shown_whole_once": line.get("text") == expected,
        "raw_whole_once": line.get("raw") == expected,
        "restarts_seen": line.get("restarts", 0),
        "raw_chars": len(line.get("raw") or ""),
        "answer_chars": len(expected),
    }


async def growth(stack: Stack, settings: Settings) -> dict[str, Any]:
    """Metric 4: bytes the peer stores per turn early and late in one long run, sampled
    while it runs and placed on turns by when each model call arrived."""
    tag = f"{stack.name}-grow"
    run = f"{tag}-0"
    if stack.stored_bytes(run) is None and stack.name == "bare":
        return {"note": "stores nothing (no durability)"}
    samples: list[tuple[float, int]] = []
    client = asyncio.ensure_future(
        run_client(stack, settings, tag=tag, turns=settings.growth_turns, tool_ms=0, words=5)
    )
    while not client.done():
        size = await asyncio.to_thread(stack.stored_bytes, run)
        if size is not None:
            samples.append((time.monotonic(), size))
        await asyncio.sleep(0.25)
    result = await client
    size = await asyncio.to_thread(stack.stored_bytes, run)
    if size is not None:
        samples.append((time.monotonic(), size))
    starts = {
        x["turn"]: x["start"]
        for x in metrics.read_lines(stack.model.requests)
        if x.get("run") == run and x.get("phase") == "end"
    }
    return {
        "failure": result.failure or _first_error(result.runs),
        **per_turn(samples, starts, settings.growth_turns),
    }


def per_turn(
    samples: list[tuple[float, int]], starts: dict[int, float], turns: int
) -> dict[str, Any]:
    """Bytes per turn over the second and the last tenth of the run (between the samples
    taken nearest to those turns' model calls)."""

    def at(turn: int) -> tuple[float, int] | None:
        moment = starts.get(turn)
        before = [s for s in samples if moment is not None and s[0] <= moment]
        return before[-1] if before else None

    window = max(2, turns // 10)  # early: the second tenth (the first samples may miss turn 1)
    spans = {"early": (window, 2 * window), "late": (turns - 1 - window, turns - 1)}
    figures: dict[str, Any] = {"turns": turns, "samples": len(samples)}
    for name, (a, b) in spans.items():
        first, last = at(a), at(b)
        if first and last and last[1] >= first[1]:
            figures[f"bytes_per_turn_{name}"] = (last[1] - first[1]) / (b - a)
    early, late = figures.get("bytes_per_turn_early"), figures.get("bytes_per_turn_late")
    if early and late:
        figures["late_vs_early"] = late / early
    if samples:
        figures["stored_bytes_total"] = samples[-1][1] - samples[0][1]
    return figures


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1))
