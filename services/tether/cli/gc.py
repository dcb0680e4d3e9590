"""`tether gc`: remove finished tasks past their retention (with the graph threads only
they ran on) and blobs nothing refers to."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from tether.cli import render
from tether.cli.common import DEFAULT_NATS, DEFAULT_PREFIX, JsonOption, NatsOption, PrefixOption
from tether.cli.running import ExitCode, connected, run
from tether.durations import human

DEFAULT_RETENTION_DAYS = 7
"""`tether.tasks.retention.DEFAULT_RETENTION` in days, here so `--help` need not load
the store (a unit test keeps them equal)."""


async def _gc(
    nats: str, prefix: str, retention: timedelta, dry_run: bool, reindex: bool, as_json: bool
) -> ExitCode:
    async with connected(nats, prefix) as client:
        report = await client.sweep(retention, dry_run=dry_run)
        indexed = await client.reindex() if reindex and not dry_run else 0
    if reindex and not as_json:
        render.print_lines([f"indexed {indexed} task(s)"])
    if as_json:
        render.print_json({**report.__dict__, "dry_run": dry_run})
        return ExitCode.OK
    verb = "would remove" if dry_run else "removed"
    ago = f"{human(retention)} ago"
    render.print_lines(
        [
            f"{verb} {len(report.tasks)} task(s) finished over {ago} ({report.kept_tasks} kept)",
            f"{verb} {len(report.blobs)} blob(s) nothing refers to ({report.kept_blobs} kept)",
            f"{verb} {len(report.builds)} build(s) no worker runs and no unfinished task "
            f"started on, announced over {ago}",
        ]
    )
    if report.sessions:
        render.print_lines(
            [f"{verb} {len(report.sessions)} session(s) (and their runs) idle since over {ago}"]
        )
    if report.threads:
        render.print_lines(
            [f"{verb} {len(report.threads)} graph thread(s) only those tasks ran on"]
        )
    if report.needs_langgraph:
        render.print_lines(
            [
                f"kept {len(report.needs_langgraph)} finished task(s) whose graph threads "
                "only the langgraph extra removes: pip install 'tether[langgraph]' where "
                "tether gc runs"
            ]
        )
    if report.tasks and not dry_run:  # a new task under a removed id would hang meanwhile
        render.print_lines(
            ["the removed tasks' ids are free again once the duplicate window has passed"]
        )
    return ExitCode.OK


def gc(
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than",
            min=0,
            metavar="DAYS",
            help="Remove tasks that finished more than DAYS days ago.",
        ),
    ] = DEFAULT_RETENTION_DAYS,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    reindex: Annotated[
        bool,
        typer.Option(
            "--reindex",
            help="Also rebuild the status index from the records (once, after upgrading "
            "from a version without it).",
        ),
    ] = False,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Remove finished tasks (record, checkpoints, events, and a LangGraph graph's thread
    once no kept task runs on it) older than --older-than, then every blob no kept task
    refers to. Running tasks are never touched; safe to run
    from cron while workers run."""
    run(_gc(nats, prefix, timedelta(days=older_than), dry_run, reindex, as_json), as_json)


def register(app: typer.Typer) -> None:
    app.command()(gc)
