"""The README's tour, run as pasted: every code block, in order, in an empty directory.

Blocks preceded by `<!-- readme-test: skip (why) -->` are not run (they need a server,
a tool or a host this machine does not have); the test says which and checks the
reason is given. The first two commands (install and test) are what `.ci/run` runs.
The machinery is `tests/e2e/tour.py`, shared with the docs pages' test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.tour import AGAIN, README, blocks, page_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_LINES = 450
"""The README is a tour; the reference lives in docs/ (issue 40, item 11)."""


def test_the_first_commands_are_the_ones_ci_runs() -> None:
    install, tests, *_ = blocks(README)
    assert install.body.strip().endswith("tether demo"), install.body
    assert tests.body.strip().endswith("just test"), tests.body
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install" in ci and "-e '.[dev]'" in ci and "\njust test" in ci


def test_every_skipped_block_says_why() -> None:
    for block in blocks(README):
        if block.skip is not None:
            assert len(block.skip) > 10, block.body


def test_the_readme_is_a_tour_not_the_reference() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move reference to docs/"
    for link in re.findall(r"\]\((docs/[\w./-]+\.md)\)", README.read_text()):
        assert (ROOT / link).is_file(), link


async def test_the_tour_runs_as_pasted(tmp_path: Path) -> None:
    tour = blocks(README)[2:]  # after the install and test commands
    async with page_run(tmp_path) as run:
        for block in tour:
            await run.block(block)
        for block in tour:  # a reader runs a block again: no fixed id is refused the second time
            if block.skip is None and block.file_name in AGAIN:
                await run.run(block)
    dev_process, dev_log = run.dev()
    assert dev_process.returncode == 0, dev_log.read_text()
    assert re.search(r"slack: report \w+\.1 is being written", dev_log.read_text())
    outputs = run.outputs
    answer = "Durable agents checkpoint every step in JetStream, so a crash costs one step."
    cli = outputs['tether submit --agent researcher "What makes an agent durable?" --wait']
    assert answer in cli, cli
    asked = outputs["ask.py"]
    assert asked.startswith(f"Two searches at once.\n{answer}\nanswer: {answer}\n"), asked
    assert "requests=2" in asked, asked  # usage: two LLM calls
    followed = next(out for line, out in outputs.items() if line.startswith("first=$("))
    assert "In one line: every step is a checkpoint." in followed, followed
    brief = outputs["brief.py"]
    assert brief == "Checkpoints make agents durable ['a crash costs one step']\n", brief
    assert "{'report': '# Report" in outputs["follow.py"]
