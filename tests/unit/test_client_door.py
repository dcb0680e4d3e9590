"""The client's door (issue 39): remote actions go through the seam, the client does
not import the API (no `client ↔ api` cycle), and no front end reaches the seam's raw
connection."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TETHER = Path(__file__).resolve().parents[2] / "services" / "tether"
FRONT_ENDS = ("client", "api", "cli", "ui", "gateway")
_RAW_CONNECTION = re.compile(r"\.nc\b|\b_nc\b")


def _imports(path: Path) -> set[str]:
    """The modules `path` imports (TYPE_CHECKING ones too: they are a dependency)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _sources(*packages: str) -> list[Path]:
    return sorted(path for package in packages for path in (TETHER / package).rglob("*.py"))


@pytest.mark.parametrize("path", _sources(*FRONT_ENDS), ids=lambda p: str(p.relative_to(TETHER)))
def test_a_front_end_imports_no_nats_py_and_reaches_no_raw_connection(path: Path) -> None:
    nats_py = sorted(m for m in _imports(path) if m == "nats" or m.startswith("nats."))
    assert nats_py == [], f"{path.name} imports {nats_py}: go through tether.nats"
    raw = [
        line.strip()
        for line in path.read_text().splitlines()
        if _RAW_CONNECTION.search(line) and not line.lstrip().startswith("#")
    ]
    assert raw == [], f"{path.name} reaches the raw connection: {raw}"


def test_the_client_imports_nothing_of_the_api() -> None:
    importing = {
        str(path.relative_to(TETHER)): sorted(
            m for m in _imports(path) if m.startswith("tether.api")
        )
        for path in _sources("client")
    }
    assert {path: api for path, api in importing.items() if api} == {}


def test_an_error_reply_maps_back_from_the_wire_module() -> None:
    from tether.errors import TaskNotFoundError
    from tether.schemas.api import ErrorCode, error_reply, raised

    reply = error_reply(TaskNotFoundError("t1"))
    assert reply.error.code is ErrorCode.NOT_FOUND
    assert isinstance(raised(reply, "t1"), TaskNotFoundError)
