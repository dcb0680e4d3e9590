"""The failure types Tether writes are one `FailureType`, exported and documented; the
wire keeps `ErrorInfo.type` a string."""

from __future__ import annotations

import re
from pathlib import Path

from tether.api import contract
from tether.schemas.codec import encode
from tether.schemas.failures import FailureType
from tether.schemas.records import ErrorInfo

ROOT = Path(__file__).resolve().parents[2]
TETHER = ROOT / "services" / "tether"
PENDING = {
    "worker/step.py",
    "worker/outputs.py",
    "worker/execution.py",
    "worker/runs.py",
    "worker/decisions.py",
}
"""Modules of another part of issue 39 (the worker wing's move) that still write these
types as literals: drop each from here as its literals become `FailureType`."""


def test_failure_type_is_exported_as_its_own_schema() -> None:
    assert contract.MESSAGES["FailureType"] is FailureType
    schema = contract.json_schemas()["FailureType"]
    assert schema["$defs"]["FailureType"]["enum"] == sorted(kind.value for kind in FailureType)


def test_the_protocol_page_lists_every_failure_type() -> None:
    page = (ROOT / "schemas" / "README.md").read_text()
    missing = [kind.value for kind in FailureType if f"`{kind.value}`" not in page]
    assert missing == []


def test_the_wire_is_unchanged() -> None:
    as_enum = ErrorInfo(type=FailureType.DEADLINE_EXCEEDED, message="late")
    assert encode(as_enum) == encode(ErrorInfo(type="DeadlineExceeded", message="late"))
    assert f"{as_enum.type}: {as_enum.message}" == "DeadlineExceeded: late"


def test_no_failure_type_is_written_as_a_literal() -> None:
    kinds = "|".join(kind.value for kind in FailureType)
    literal = re.compile(rf'(type=|UnstorableResult\(|kind: str = )"({kinds})"')
    found = [
        f"{path.relative_to(TETHER)}:{number}"
        for path in sorted(TETHER.rglob("*.py"))
        if str(path.relative_to(TETHER)) not in PENDING
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == [], f"write FailureType.<NAME> instead: {found}"
