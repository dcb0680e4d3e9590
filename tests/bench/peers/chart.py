"""The chart of the comparison, drawn with matplotlib in its own environment:
`python chart.py results.json out.png` (run by the harness with the `chart` peer's Python)."""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(source: str, target: str) -> None:
    peers = json.loads(open(source).read())
    names = [p["label"] for p in peers]
    panels = [
        (
            "time to first token, p50 (ms)",
            [p.get("latency", {}).get("ttft_ms", {}).get("p50") for p in peers],
        ),
        (
            "gap model end -> tool start, p50 (ms)",
            [p.get("latency", {}).get("model_to_tool_ms", {}).get("p50") for p in peers],
        ),
        (
            "gap tool end -> model call, p50 (ms)",
            [p.get("latency", {}).get("tool_to_model_ms", {}).get("p50") for p in peers],
        ),
        ("runs/s, 200 concurrent", [p.get("load", {}).get("runs_per_s") for p in peers]),
    ]
    figure, axes = plt.subplots(
        1, len(panels), figsize=(4.2 * len(panels), 0.55 * len(names) + 1.8)
    )
    for ax, (title, values) in zip(axes, panels, strict=True):
        shown = [v or 0 for v in values]
        bars = ax.barh(names, shown, color=["#2a7" if "Tether" in n else "#999" for n in names])
        for bar, value in zip(bars, values, strict=True):
            ax.text(
                bar.get_width(),
                bar.get_y() + bar.get_height() / 2,
                " n/a" if value is None else f" {value:.0f}",
                va="center",
                fontsize=8,
            )
        ax.set_title(title, fontsize=9)
        ax.invert_yaxis()
        if ax is not axes[0]:
            ax.set_yticklabels([])
    figure.tight_layout()
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
