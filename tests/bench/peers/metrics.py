"""The figures, from what the client saw and what the model and the tools logged (pure:
no process is touched here)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tests.bench.peers.model import answer


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def ok_runs(runs: list[dict[str, Any]], words: int) -> list[dict[str, Any]]:
    """Runs that ended with the whole answer, once."""
    return [r for r in runs if not r["error"] and r["text"] == answer(r["run"], words)]


def ttft_ms(runs: list[dict[str, Any]]) -> list[float]:
    return [(r["first_token"] - r["submitted"]) * 1000 for r in runs if r["first_token"]]


def _by_call(lines: list[dict[str, Any]], runs: set[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """The first finished model call or tool call of each (run, turn)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for line in lines:
        if line.get("phase") == "end" and not line.get("cut") and line["run"] in runs:
            found.setdefault((line["run"], line["turn"]), line)
    return found


def gaps_ms(model_log: Path, tool_log: Path, runs: set[str], turns: int) -> dict[str, list[float]]:
    """Per run and step: a model call's end to its tool's start, a tool's end to the next
    model call's start."""
    model = _by_call(read_lines(model_log), runs)
    tools = _by_call(read_lines(tool_log), runs)
    to_tool, to_model = [], []
    for run in runs:
        for turn in range(turns - 1):
            call, tool, after = (
                model.get((run, turn)),
                tools.get((run, turn)),
                model.get((run, turn + 1)),
            )
            if call and tool:
                to_tool.append((tool["start"] - call["end"]) * 1000)
            if tool and after:
                to_model.append((after["start"] - tool["t"]) * 1000)
    return {"model_to_tool": to_tool, "tool_to_model": to_model}


def summary(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "n": len(values)}


def sent(lines: list[dict[str, Any]], run: str, turn: int, phase: str) -> list[dict[str, Any]]:
    return [
        x
        for x in lines
        if x.get("run") == run and x.get("turn") == turn and x.get("phase") == phase
    ]
