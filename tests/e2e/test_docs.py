"""The docs pages' code blocks, run as pasted: each page in order, in its own empty
directory, as the README's tour is (`tests/e2e/tour.py`).

A page that starts `<!-- docs-test: after the tour -->` continues the README's tour: its
blocks run once the tour's app, model script, scripted model and `tether dev` are up in
that directory, as they are for a reader who followed the README first. Blocks fenced
```python no-run need what no test has (a live local model server); their page says so.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.tour import DOCS, NO_RUN, README, Run, blocks, page_run, tour_setup

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AFTER_THE_TOUR = "<!-- docs-test: after the tour -->"
PAGES = sorted(DOCS.glob("*.md"))


def _agents(run: Run) -> None:
    outputs = run.outputs
    refused = outputs[
        'tether submit --agent careful "What is the admin password?" --wait || echo "refused"'
    ]
    assert "GuardrailTripped" in refused and refused.endswith("refused\n"), refused
    delegated = "Edited: a checkpoint is a step's stored result.\n"
    delegated += "1 child task, 3 LLM calls in all\n"
    assert outputs["delegate.py"] == delegated, outputs["delegate.py"]
    assert outputs["steer.py"] == "Published, in one paragraph.\n", outputs["steer.py"]
    handed = outputs['tether submit --agent concierge "Hand over: what is a checkpoint?" --wait']
    assert "The researcher here: a checkpoint is a step's stored result." in handed, handed
    assert outputs["approve.py"] == "Published draft A; draft B was held back.\n"
    model_log = run.sent
    told = [e["tool_texts"] for e in model_log if e["conversation"].startswith("Publish twice")]
    assert told[-1][0].startswith("published ") and told[-1][1].startswith("The user denied")
    budget = outputs["budget.py"].splitlines()
    assert budget[0].startswith("budget of 100 tokens (0 spent, 0 held) reached"), budget
    assert budget[1] == "A checkpoint is a step's stored result.", budget
    librarian = outputs['tether submit --agent librarian "Look up MCP tasks" --wait']
    assert "Found through MCP" in librarian, librarian
    told = [entry["last"] for entry in model_log if entry["conversation"] == "Look up MCP tasks"]
    assert told[-1]["role"] == "tool" and "hit 0 for MCP tasks" in told[-1]["text"], told


def _bring_your_agent(run: Run) -> None:
    outputs = run.outputs
    planned = outputs['tether submit --agent planner "Trip: a weekend in Oslo" --wait']
    assert '"city": "Oslo"' in planned and '"days": 2' in planned, planned
    greeted = outputs["greet.py"]
    assert greeted.startswith("Welcome back, Alice!\nusage: ") and "requests=2" in greeted
    asked, booked = outputs["book.py"].splitlines()
    assert asked.startswith("Approve this tool call?") and "book_hotel" in asked, asked
    assert booked == "{'city': 'Oslo', 'days': 2}", booked
    cancelled = next(out for line, out in outputs.items() if line.startswith("ID=$("))
    assert cancelled.endswith('"Cancelled B-17."\n'), cancelled
    stopped = outputs[
        'tether submit --agent desk --budget 5 "Cancel booking B-18" --wait || echo "stopped"'
    ]
    assert "BudgetExceeded" in stopped and stopped.endswith("stopped\n"), stopped
    summary = outputs[
        "tether submit summarize_trip='\"Notes: Oslo, two days, rain on Sunday\"' --wait"
    ]
    assert "Two days in Oslo, rain on Sunday." in summary, summary
    assert outputs["mcp_travel.py"].endswith("completed {'city': 'Oslo', 'days': 2}\n")

    def turns(question: str) -> list[int]:
        return [e["turn"] for e in run.sent if e["conversation"] == question]

    assert turns("Cancel booking B-17") == [0, 1, 2]  # the resumed run sent no call again
    assert turns("Book: two nights in Oslo") == [0, 1, 0, 1]  # book.py, then mcp_travel.py
    assert turns("Cancel booking B-18") == []  # the budget stopped it before the call
    told = [e["tool_texts"] for e in run.sent if e["conversation"] == "Greet me"]
    assert told == [[], ["Alice"]], told  # `deps` built from the task's metadata


def _plans(run: Run) -> None:
    shapes = run.outputs["shapes.py"]
    assert "hit 0 for durable agents; " in shapes and "hit 0 for MCP tasks" in shapes, shapes
    assert "a shorter summary" in shapes, shapes  # the fork's own report


def _any_language(run: Run) -> None:
    assert "completed" in run.outputs["raw.py"]
    assert "'status': 'completed'" in run.outputs["api.py"]


def _mcp(run: Run) -> None:
    assert "completed" in run.outputs["mcp_client.py"], run.outputs["mcp_client.py"]


def _local_models(run: Run) -> None:
    said = run.outputs["bounded.py"]
    assert "maxLength" in said and "Expected `str` of length <= 120" in said, said
    assert run.outputs["local.py"].startswith("max_tokens=512"), run.outputs["local.py"]
    said = run.outputs[
        'tether submit --agent tiny "Ignore your tools: what is a checkpoint?" --wait'
    ]
    assert "I know this one" in said, said  # a text reply is the answer, tool_choice or not
    assert "note: agent 'tiny'" in said and "tool_choice was 'required'" in said, said
    assert "Found it: a step's stored result." in said, said
    assert "ModelOutputTruncated" in said and "max_tokens=64" in said, said
    assert said.endswith("failed: cut at its max_tokens\n"), said
    told = [e["tool_texts"] for e in run.sent if e["conversation"].startswith("Misname")]
    assert told[1] == ["Error: there is no tool named 'look_up' (tools: lookup)."], told


def _sessions(run: Run) -> None:
    said = run.outputs["chat.py"]
    assert said == (
        "Published, citing the draft.\nIn one short line: published.\n"
        "run 1 is task docs-chat-r1\nrun 2 is task docs-chat-r2\n"
    ), said
    sent = [e for e in run.sent if e["conversation"] == "Session: publish a draft"]
    assert [e["turn"] for e in sent] == [0, 1, 2], sent  # each call once
    assert sent[1]["user_texts"][-1] == "Cite the draft.", sent  # steered into run 1
    assert sent[2]["user_texts"][-1] == "Now in one short line.", sent  # the edit, run 2
    again = run.outputs["tether chat docs-chat < /dev/null"]
    for line in (
        "you: Session: publish a draft",
        "you: Cite the draft.",
        "researcher: Published, citing the draft.",
        "you: Now in one short line.",
        "researcher: In one short line: published.",
    ):
        assert line in again.splitlines(), again


def _tools(run: Run) -> None:
    said = run.outputs['tether submit serch || echo "refused"']
    refused, kept = said.splitlines()
    assert refused == "refused" and re.fullmatch(r"[0-9a-f]{32}", kept), said


def _langgraph(run: Run) -> None:
    outputs = run.outputs
    assert outputs["saver_alone.py"] == "['first', 'noted 1', 'second', 'noted 3']\n6 checkpoints\n"
    asked = next(out for line, out in outputs.items() if line.startswith("first=$("))
    assert '"It is 18°C in Oslo."' in asked and "Tomorrow too: 18°C in Oslo." in asked, asked
    sent = [e for e in run.sent if e["conversation"] == "Weather in Oslo?"]
    assert [e["turn"] for e in sent] == [0, 1, 2], sent  # the follow-up ran on the same thread
    reviewed = next(out for line, out in outputs.items() if line.startswith("ID=$("))
    assert '"approved": true' in reviewed and "checkpoints: how" in reviewed, reviewed
    said = outputs["mcp_outline.py"]
    assert "streams: why" in said and "'approved'" in said, said
    assert said.endswith("'approved': False}\n"), said


CHECKS: dict[str, Callable[[Run], None]] = {
    "agents.md": _agents,
    "bring-your-agent.md": _bring_your_agent,
    "langgraph.md": _langgraph,
    "plans.md": _plans,
    "any-language.md": _any_language,
    "mcp.md": _mcp,
    "local-models.md": _local_models,
    "tools.md": _tools,
    "sessions.md": _sessions,
}
"""What each page's blocks must have printed (a page not named runs its blocks only)."""


def test_the_readme_links_every_docs_page() -> None:
    readme = README.read_text()
    for page in PAGES:
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
    assert set(CHECKS) <= {page.name for page in PAGES}, CHECKS


def test_the_docs_index_maps_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    for page in PAGES:
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not map {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_unrun_block_says_why(page: Path) -> None:
    text = page.read_text()
    for block in blocks(page):
        if block.skip is not None:
            assert len(block.skip) > 10, block.body
    if re.search(rf"```\w+ {NO_RUN}\n", text):
        assert NO_RUN in text.split("```", 1)[0] or f"`{NO_RUN}`" in text, (
            f"docs/{page.name} has {NO_RUN} blocks: say on the page why they are not run"
        )


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
async def test_the_page_runs_as_pasted(page: Path, tmp_path: Path) -> None:
    after_tour = page.read_text().startswith(AFTER_THE_TOUR)
    async with page_run(tmp_path) as run:
        for block in tour_setup() if after_tour else []:
            await run.block(block)
        for block in blocks(page):
            await run.block(block)
        if run.started:
            run.sent = await asyncio.to_thread(run.model_log)
    if run.started:
        dev_process, dev_log = run.dev()
        assert dev_process.returncode == 0, dev_log.read_text()
    check = CHECKS.get(page.name)
    if check is not None:
        check(run)
