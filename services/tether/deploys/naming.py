"""Which build of the code a worker runs: named by its operator, or by what it serves.

Every step's checkpoint and its `step_started`/`step_completed` events name the build
that ran it, and a task's record the build that started it, so a deploy can be read
back: which code ran which step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import msgspec

from tether.deploys.served import ServedTool
from tether.errors import DefinitionError

BUILD_PATTERN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")


def validate_build(name: str) -> str:
    if not BUILD_PATTERN.match(name):
        raise DefinitionError(
            f"build {name!r} is not a build name: use up to 64 letters, digits, '_', '-' "
            "and '.' (e.g. v2, 1.4.0, 2026-12-02.1, a git hash)"
        )
    return name


def default_build(versions: Iterable[str | None], tools: Iterable[ServedTool]) -> str:
    """The apps' versions when they all have one (`App(version=...)`), else `h` and a
    hash of what the worker serves: its tools' names, descriptions and schemas, so two
    workers with the same definitions share a build and a changed schema makes a new one."""
    named = list(versions)
    if named and all(named):
        return validate_build("_".join(v for v in named if v))
    shapes = sorted(
        (tool.name, tool.description, tool.input_schema(), tool.output_schema) for tool in tools
    )
    digest = hashlib.sha256(msgspec.json.encode(shapes)).hexdigest()
    return "h" + digest[:11]
