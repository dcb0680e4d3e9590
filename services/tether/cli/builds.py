"""`tether builds`: the builds workers run, and where new tasks go (ramp, promote,
rollback: the operator's, refused at once to any other NATS user)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from tether.cli import render
from tether.cli.common import DEFAULT_NATS, DEFAULT_PREFIX, JsonOption, NatsOption, PrefixOption
from tether.cli.running import ExitCode, connected, run

if TYPE_CHECKING:
    from rich.table import Table

    from tether.schemas.builds import BuildsReply, DeployRequest

BuildArgument = Annotated[str, typer.Argument(metavar="BUILD", help="A build's name, e.g. v2.")]


def builds_table(reply: BuildsReply) -> Table:
    from rich.table import Table

    from tether.cli.output import format_time

    table = Table(box=None, header_style="bold")
    for name in ("build", "state", "new tasks", "workers", "running", "routed", "first seen"):
        table.add_column(name)
    table.add_column("does not fit the build before", overflow="fold")
    for row in reply.builds:
        workers = f"{row.workers}" + (f" ({row.draining} draining)" if row.draining else "")
        changes = "; ".join(f"{tool}: {', '.join(c)}" for tool, c in row.changes.items())
        table.add_row(
            row.build,
            row.state,
            f"{row.share:g}%",
            workers,
            str(row.running),
            str(row.routed),
            format_time(row.first_seen),
            f"{row.before}: {changes}" if changes else "",
        )
    return table


async def _builds(nats: str, prefix: str, change: DeployRequest | None, as_json: bool) -> ExitCode:
    """List the builds, after `change` (written as this NATS user: the operator's)."""
    async with connected(nats, prefix) as client:
        if change is None:
            reply = await client.builds()
        elif change.action == "ramp":
            reply = await client.ramp(change.build, change.percent)
        elif change.action == "promote":
            reply = await client.promote(change.build)
        else:
            reply = await client.rollback(change.build)
    if as_json:
        render.print_json(reply)
        return ExitCode.OK
    if reply.said:
        render.print_lines([reply.said])
    if reply.builds:
        render.print_table(builds_table(reply))
    else:
        render.print_lines(["no build yet: start a worker (tether worker APP --build NAME)"])
    return ExitCode.OK


def builds_ls(
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """List the builds, oldest first: their workers, steps, share of new tasks, and how
    their tools do not fit the build before."""
    run(_builds(nats, prefix, None, as_json), as_json)


def _deploy(
    action: Literal["ramp", "promote", "rollback"], build: str, percent: float = 0.0
) -> DeployRequest:
    from tether.schemas.builds import DeployRequest

    return DeployRequest(action=action, build=build, percent=percent)


def ramp(
    build: BuildArgument,
    percent: Annotated[
        float, typer.Option("--percent", min=0, max=100, help="The share of new tasks.")
    ],
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Send a share of new tasks (by task id) to BUILD; the rest go where they went."""
    run(_builds(nats, prefix, _deploy("ramp", build, percent), as_json), as_json)


def promote(
    build: BuildArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Send every new task, and every moving step, to BUILD."""
    run(_builds(nats, prefix, _deploy("promote", build), as_json), as_json)


def rollback(
    build: BuildArgument,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
    as_json: JsonOption = False,
) -> None:
    """Send new tasks and moving steps back to the build before BUILD (pinned tasks stay
    on BUILD while its workers run)."""
    run(_builds(nats, prefix, _deploy("rollback", build), as_json), as_json)


def register(app: typer.Typer) -> None:
    builds = typer.Typer(
        help="Builds: which code runs which steps, and where new tasks go.",
        invoke_without_command=True,
    )

    @builds.callback()
    def listing(
        ctx: typer.Context,
        nats: NatsOption = DEFAULT_NATS,
        prefix: PrefixOption = DEFAULT_PREFIX,
        as_json: JsonOption = False,
    ) -> None:
        """The builds workers run; `ramp`, `promote` and `rollback` change where tasks go."""
        if ctx.invoked_subcommand is None:
            builds_ls(nats, prefix, as_json)

    builds.command("ls")(builds_ls)
    builds.command("ramp")(ramp)
    builds.command("promote")(promote)
    builds.command("rollback")(rollback)
    app.add_typer(builds, name="builds")
