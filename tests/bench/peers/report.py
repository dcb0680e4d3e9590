# ruff: noqa: E501 (the tables' header rows are one line each)
"""The Markdown tables of a run: every cell a figure or, where a peer cannot do the thing
or the scenario failed, the words that say so."""

from __future__ import annotations

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


def latency_table(peers: list[dict[str, Any]]) -> list[str]:
    bare = next((p for p in peers if p["name"] == "bare"), None)
    base = (bare or {}).get("latency", {})
    rows = [
        "| peer | first token p50 / p99 (ms) | minus bare p50 / p99 | model end → tool start p50 / p99 (minus bare p50) | tool end → next model call p50 / p99 (minus bare p50) | live text |",
        "|---|---|---|---|---|---|",
    ]
    for peer in peers:
        section = peer.get("latency")
        failed = _failed(section)
        if failed:
            rows.append(f"| {peer['label']} | {failed} | | | | |")
            continue
        assert section is not None
        t, b = section["ttft_ms"], base.get("ttft_ms", {})
        cells = [
            f"{_ms(t['p50'])} / {_ms(t['p99'])}",
            f"{_diff(t['p50'], b.get('p50'))} / {_diff(t['p99'], b.get('p99'))}",
        ]
        for key in ("model_to_tool_ms", "tool_to_model_ms"):
            g, gb = section[key], base.get(key, {})
            cells.append(f"{_ms(g['p50'])} / {_ms(g['p99'])} ({_diff(g['p50'], gb.get('p50'))})")
        live = (
            "yes" if peer["live_stream"] else "no: the whole answer arrives when the call returns"
        )
        note = f" ({section['ok']}/{section['runs']} ok)" if section["ok"] < section["runs"] else ""
        rows.append(f"| {peer['label']}{note} | " + " | ".join(cells) + f" | {live} |")
    return rows


def load_table(peers: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| peer | runs/s | CPU ms per run: server / worker / client | peak RSS MB: server / worker |",
        "|---|---|---|---|",
    ]
    for peer in peers:
        section = peer.get("load")
        failed = _failed(section)
        if failed:
            rows.append(f"| {peer['label']} | {failed} | | |")
            continue
        assert section is not None
        cpu = " / ".join(
            _ms(section.get(f"cpu_ms_per_run_{g}")) for g in ("server", "worker", "client")
        )
        rss = " / ".join(_ms(section.get(f"peak_rss_mb_{g}")) for g in ("server", "worker"))
        note = f" ({section['ok']}/{section['runs']} ok)" if section["ok"] < section["runs"] else ""
        rows.append(f"| {peer['label']}{note} | {_ms(section['runs_per_s'])} | {cpu} | {rss} |")
    return rows


def crash_table(peers: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| peer | killed | moves again after (s) | new worker ready (s) | finished model calls sent again | finished tool calls run again | the following client is shown |",
        "|---|---|---|---|---|---|---|",
    ]
    for peer in peers:
        for where in ("tool", "stream"):
            section = peer.get(f"crash_{where}")
            failed = _failed(section)
            if failed or section is None:
                rows.append(f"| {peer['label']} | mid-{where} | {failed} | | | | |")
                continue
            rows.append(
                f"| {peer['label']} | mid-{where} | {_ms(section['moved_again_s'])} | {_ms(section['worker_ready_s'])} | "
                f"{section['finished_model_calls_sent_again']} | {section['finished_tool_calls_run_again']} | {_shown(section)} |"
            )
    return rows


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


def growth_table(peers: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| peer | bytes per turn, second tenth of the turns | last tenth | last / second |",
        "|---|---|---|---|",
    ]
    for peer in peers:
        section = peer.get("growth")
        failed = _failed(section)
        if failed or section is None:
            rows.append(f"| {peer['label']} | {failed} | | |")
            continue
        ratio = section.get("late_vs_early")
        rows.append(
            f"| {peer['label']} | {_ms(section.get('bytes_per_turn_early'))} | "
            f"{_ms(section.get('bytes_per_turn_late'))} | {'—' if ratio is None else f'{ratio:.2f}'} |"
        )
    return rows


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


def waiting_table(peers: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| peer | all waiting after (s) | server messages/s while waiting (what is counted) | CPU % while waiting: server / worker | RSS MB while waiting: server / worker | all approved → all ended (s) |",
        "|---|---|---|---|---|---|",
    ]
    for peer in peers:
        section = peer.get("waiting")
        failed = _failed(section)
        if failed or section is None:
            rows.append(f"| {peer['label']} | {failed} | | | | |")
            continue
        cpu = " / ".join(_ms(section.get(f"cpu_pct_{g}")) for g in ("server", "worker"))
        rss = " / ".join(_ms(section.get(f"rss_mb_{g}")) for g in ("server", "worker"))
        rate = section.get("messages_per_s")
        counted = (
            f"{_ms(rate)} ({section['counted']})"
            if rate is not None
            else f"not counted: {section['counted']}"
        )
        note = f" ({section['ok']}/{section['runs']} ok)" if section["ok"] < section["runs"] else ""
        rows.append(
            f"| {peer['label']}{note} | {_ms(section.get('all_waiting_after_s'))} | {counted} | {cpu} | {rss} | "
            f"{_ms(section.get('resume_all_s'))} |"
        )
    return rows


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
