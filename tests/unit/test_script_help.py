"""`python -m tether.testing.llm --help` documents the script format, every field of it."""

from __future__ import annotations

import msgspec
import pytest

from tether.testing.llm.__main__ import SCRIPT_FORMAT, parse_args
from tether.testing.llm.script import Fault, Script, ToolCall, Turn, Usage

TEST_ONLY = {"raw_escapes"}


@pytest.mark.parametrize("struct", [Script, Turn, ToolCall, Usage, Fault])
def test_the_help_names_every_field_of_the_script(struct: type[msgspec.Struct]) -> None:
    fields = set(struct.__struct_fields__) - TEST_ONLY
    missing = {name for name in fields if f'"{name}"' not in SCRIPT_FORMAT}
    assert not missing, f"--help does not document {struct.__name__} fields {missing}"


def test_help_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    assert "FAULT, for attempt n of the turn" in capsys.readouterr().out
