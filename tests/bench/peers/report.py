# ruff: noqa: E501 (the tables' header rows are one line each)
"""The Markdown tables of a run: every cell a figure or, where a peer cannot do the thing
or the scenario failed, the words that say so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _diff(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "—"
    return f"{value - base:+.1f}"


def _failed(section: dict[str, Any] | None) -> str | None:
    if not section:
        return "not run"
    if "error" in section:
        return f"failed: {section['error']}"
    if section.get("note"):
        return str(section["note"])
    if section.get("failure") and not section.get("ok"):
        return f"failed: {section['failure']}"
    return None


Section = dict[str, Any]
Cells = Callable[[Section, Section], list[str]]
"""A row's figures, from its peer and the peer's section."""


def _table(
    header: list[str], rows: list[tuple[list[str], Section, str]], cells: Cells
) -> list[str]:
    """One row per (first cells, peer, section key): the section's figures, or the words
    that say why there are none, the rest of that row left empty."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for first, peer, key in rows:
        section = peer.get(key)
        failed = _failed(section)
        if failed or section is None:
            empty = len(header) - len(first) - 1
            lines.append("| " + " | ".join([*first, str(failed)]) + " |" + " |" * empty)
        else:
            lines.append("| " + " | ".join([*first, *cells(peer, section)]) + " |")
    return lines


def _each(peers: list[Section], key: str) -> list[tuple[list[str], Section, str]]:
    """A row per peer, its label saying when not every run of the section was ok."""
    return [([_label(peer, peer.get(key))], peer, key) for peer in peers]


def _label(peer: Section, section: Section | None) -> str:
    if section and not _failed(section) and section["ok"] < section["runs"]:
        return f"{peer['label']} ({section['ok']}/{section['runs']} ok)"
    return str(peer["label"])


def latency_table(peers: list[Section]) -> list[str]:
    bare = next((p for p in peers if p["name"] == "bare"), None)
    base = (bare or {}).get("latency", {})

    def cells(peer: Section, section: Section) -> list[str]:
        t, b = section["ttft_ms"], base.get("ttft_ms", {})
        found = [
            f"{_ms(t['p50'])} / {_ms(t['p99'])}",
            f"{_diff(t['p50'], b.get('p50'))} / {_diff(t['p99'], b.get('p99'))}",
        ]
        for key in ("model_to_tool_ms", "tool_to_model_ms"):
            g, gb = section[key], base.get(key, {})
            found.append(f"{_ms(g['p50'])} / {_ms(g['p99'])} ({_diff(g['p50'], gb.get('p50'))})")
        live = (
            "yes" if peer["live_stream"] else "no: the whole answer arrives when the call returns"
        )
        return [*found, live]

    header = [
        "peer",
        "first token p50 / p99 (ms)",
        "minus bare p50 / p99",
        "model end → tool start p50 / p99 (minus bare p50)",
        "tool end → next model call p50 / p99 (minus bare p50)",
        "live text",
    ]
    return _table(header, _each(peers, "latency"), cells)


def load_table(peers: list[Section]) -> list[str]:
    def cells(peer: Section, section: Section) -> list[str]:
        cpu = " / ".join(
            _ms(section.get(f"cpu_ms_per_run_{g}")) for g in ("server", "worker", "client")
        )
        rss = " / ".join(_ms(section.get(f"peak_rss_mb_{g}")) for g in ("server", "worker"))
        return [_ms(section["runs_per_s"]), cpu, rss]

    header = [
        "peer",
        "runs/s",
        "CPU ms per run: server / worker / client",
        "peak RSS MB: server / worker",
    ]
    return _table(header, _each(peers, "load"), cells)


def crash_table(peers: list[Section]) -> list[str]:
    def cells(peer: Section, section: Section) -> list[str]:
        return [
            _ms(section["moved_again_s"]),
            _ms(section["worker_ready_s"]),
            str(section["finished_model_calls_sent_again"]),
            str(section["finished_tool_calls_run_again"]),
            _shown(section),
        ]

    header = [
        "peer",
        "killed",
        "moves again after (s)",
        "new worker ready (s)",
        "finished model calls sent again",
        "finished tool calls run again",
        "the following client is shown",
    ]
    rows = [
        ([peer["label"], f"mid-{where}"], peer, f"crash_{where}")
        for peer in peers
        for where in ("tool", "stream")
    ]
    return _table(header, rows, cells)


def _shown(section: dict[str, Any]) -> str:
    if section.get("failure"):
        return f"no answer: {section['failure']}"
    if section["raw_whole_once"]:
        return "the answer once and whole"
    if section["shown_whole_once"]:
        return (
            f"the answer whole after dropping a cut-off attempt ({section['restarts_seen']} restart(s) "
            f"marked; a printer of every piece shows {section['raw_chars']} chars for {section['answer_chars']})"
        )
    shown, whole = section["raw_chars"], section["answer_chars"]
    if shown > whole:
        return f"the answer with a piece repeated ({shown} chars shown for {whole})"
    return f"the answer with a piece missing or wrong ({shown} chars shown for {whole})"


def growth_table(peers: list[Section]) -> list[str]:
    def cells(peer: Section, section: Section) -> list[str]:
        ratio = section.get("late_vs_early")
        return [
            _ms(section.get("bytes_per_turn_early")),
            _ms(section.get("bytes_per_turn_late")),
            "—" if ratio is None else f"{ratio:.2f}",
        ]

    header = ["peer", "bytes per turn, second tenth of the turns", "last tenth", "last / second"]
    rows = [([peer["label"]], peer, "growth") for peer in peers]
    return _table(header, rows, cells)


NOTES = [
    "## How it was measured",
    "- Every peer runs the same Pydantic AI agent against the same bench model; the client is a separate "
    "process in the peer's own environment, and the harness reads the model's and the tools' logs "
    "(monotonic clocks of one machine). p50 / p99 are nearest-rank; latency runs go one at a time, after "
    "warm-up runs (the client's first two runs are not counted either).",
    "- Server CPU and memory are the process trees of: nats-server and `tether dispatcher` (Tether); "
    "`temporal server start-dev` with its SQLite file (Temporal); the PostgreSQL postmaster and its backends "
    "(DBOS); restate-server (Restate). The worker is the one process serving the agent (`tether worker`, "
    "the Temporal worker, the DBOS app, the Restate handler under hypercorn). Bare runs the agent in its client.",
    "- Crashes: the worker is SIGKILLed 0.3 s after the second tool started (the tool sleeps 1.5 s) or 0.3 s "
    "after the answer's first token (300 words), and a new worker is started at once. *Moves again* is the "
    "first model call or tool start after the kill. Temporal's figures follow Pydantic AI's activity "
    "defaults (60 s `start_to_close_timeout` for tools, 30 s heartbeat timeout for model calls): nothing "
    "notices a dead worker sooner unless `activity_config` is tuned. A restarted answer counts as *repeated* "
    "when a client printing every piece it receives shows the cut-off attempt and the new one; Tether marks "
    "each piece with its attempt, so a client can drop the cut-off one. Restate streams no text to a caller, "
    "so its client has nothing to repeat.",
    "- DBOS's client enqueues the workflow (a `DBOSClient` in another process can only enqueue) and the "
    "worker polls its queues on an interval (DBOS's default), which is most of its time to first token.",
    "- Stored bytes: Tether, JetStream's total (`/jsz`, every stream); Temporal, the workflow's "
    "`historySizeBytes`; DBOS, the run's rows in `workflow_status`, `operation_outputs` and `streams`; "
    "Restate, the invocation's journal (`raw_length`). Sampled every 0.25 s while a 5-word, no-sleep run of "
    "`growth_turns` turns goes on, placed on turns by when each model call arrived.",
]


def waiting_table(peers: list[Section]) -> list[str]:
    def cells(peer: Section, section: Section) -> list[str]:
        cpu = " / ".join(_ms(section.get(f"cpu_pct_{g}")) for g in ("server", "worker"))
        rss = " / ".join(_ms(section.get(f"rss_mb_{g}")) for g in ("server", "worker"))
        rate = section.get("messages_per_s")
        counted = (
            f"{_ms(rate)} ({section['counted']})"
            if rate is not None
            else f"not counted: {section['counted']}"
        )
        return [
            _ms(section.get("all_waiting_after_s")),
            counted,
            cpu,
            rss,
            _ms(section.get("resume_all_s")),
        ]

    header = [
        "peer",
        "all waiting after (s)",
        "server messages/s while waiting (what is counted)",
        "CPU % while waiting: server / worker",
        "RSS MB while waiting: server / worker",
        "all approved → all ended (s)",
    ]
    return _table(header, _each(peers, "waiting"), cells)


def markdown(meta: dict[str, Any], peers: list[dict[str, Any]]) -> str:
    lines = [
        "# One agent, five ways",
        "",
        f"{meta['date']}, commit {meta['commit']}, {meta['machine']}; the harness took "
        f"{meta.get('wall_s', '?')} s. Settings: {meta['settings']}.",
        f"Versions: {meta['versions']}.",
        "",
        "The agent: Pydantic AI, two tools, three model turns (tool A, tool B, a streamed answer: 3 model "
        "calls and 2 tool calls, the 5 steps of the issue's load runs) on the bench model "
        "(its own process, a fixed latency per turn and per token).",
        "",
        "## Time to first token and the gap each durable step adds (one run at a time)",
        *latency_table(peers),
        "",
        f"## {meta['load']} concurrent runs",
        *load_table(peers),
        "",
        "## A worker SIGKILLed mid-tool and mid-stream",
        *crash_table(peers),
        "",
        "## Stored bytes per turn over one long run",
        *growth_table(peers),
        "",
        f"## {meta.get('wait_runs', 1000)} runs waiting for an approval",
        "Tether: the agent's `get_weather` needs approval (Pydantic AI's `requires_approval` through the "
        "integration; `approval=[...]` on Tether's Agent), so each run makes its first model call, then waits "
        "as a `waiting` task; after the approval it runs the tool and the answer. Temporal, DBOS, Restate: "
        "the workflow waits first (a signal, `DBOS.recv`, a durable promise), then runs the whole agent "
        "(two model calls and the tool), so their resume time holds one model call more.",
        "",
        *waiting_table(peers),
        "",
        *NOTES,
        "",
    ]
    return "\n".join(lines)
