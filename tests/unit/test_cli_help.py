"""`tether --help` loads typer and the command declarations only: NATS, the wire schemas,
the client, rich and the roles' frameworks load when a command runs (issue 39: a help
under 0.5 s). Structural, not timed: a timing test would be flaky on a loaded machine."""

from __future__ import annotations

import subprocess
import sys
import typing
from datetime import timedelta

import pytest
import typer
from typer.testing import CliRunner

from tether.cli import common, gc, tasks
from tether.cli.main import app

HEAVY = (
    "nats",
    "msgspec",
    "rich",
    "openai",
    "mcp",
    "starlette",
    "uvicorn",
    "faststream",
    "opentelemetry",
    "prometheus_client",
    "importlib.metadata",
    "tether.client",
    "tether.nats",
    "tether.schemas",
    "tether.worker",
    "tether.agents",
    "tether.tasks",
)
_HELP = """
import sys
sys.argv = ["tether", "--help"]
from tether.cli import main
try:
    main()
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def test_help_loads_nothing_heavy() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HELP], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Usage: tether" in done.stdout
    loaded = done.stderr.split()
    heavy = sorted(
        module for module in loaded if any(module == h or module.startswith(h + ".") for h in HEAVY)
    )
    assert heavy == [], f"`tether --help` imports {heavy}: import them inside the commands"


def _commands(group: typing.Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in getattr(group, "commands", {}).items():
        found.append((*path, name))
        found += _commands(command, (*path, name))
    return found


@pytest.mark.parametrize("path", _commands(typer.main.get_command(app)), ids=" ".join)
def test_every_command_still_has_its_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_the_cli_copies_of_defaults_are_the_originals() -> None:
    from tether.nats.connection import DEFAULT_URL
    from tether.schemas.records import TaskStatus
    from tether.tasks.retention import DEFAULT_RETENTION

    assert common.DEFAULT_NATS == DEFAULT_URL
    assert gc.DEFAULT_RETENTION_DAYS == DEFAULT_RETENTION / timedelta(days=1)
    assert list(typing.get_args(tasks.Status)) == [status.value for status in TaskStatus]
