"""A research agent and three tools over a small offline corpus.

`researcher` is an LLM agent that calls `search`; `search` ranks the corpus documents
for a query, `summarize` extracts the sentences that matter, `write_report` writes a
Markdown report (the three also run as a plain pipeline). Task metadata may set
`pace` (seconds of pretend work per document, so a demo can crash a step midway) and
`out_dir` (where reports go). The agent's model is `$TETHER_DEMO_MODEL` at
`$TETHER_DEMO_BASE_URL`, else `$OPENAI_BASE_URL` (`tether demo` sets the first, and
`$TETHER_DEMO_BASE_URL_FROM` to say where the URL came from).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import msgspec

from tether import Agent, App, OpenAIModel, StepContext, TerminalError

CORPUS = Path(__file__).parent / "corpus"
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STOP = frozenset(
    "a an and are as at be by can for from in is it its of on or that the to with".split()
)

app = App("research")


class Query(msgspec.Struct, frozen=True):
    query: str
    limit: int = 4
    depth: int = 1
    """How thoroughly to read: each document takes `depth` times the pace."""


class Hit(msgspec.Struct, frozen=True):
    title: str
    path: str
    score: int
    text: str


class Found(msgspec.Struct, frozen=True):
    query: str
    hits: list[Hit]


class Point(msgspec.Struct, frozen=True):
    source: str
    sentence: str


class Summary(msgspec.Struct, frozen=True):
    query: str
    points: list[Point]


def terms(text: str) -> set[str]:
    return {word for word in _WORD.findall(text.lower()) if word not in _STOP}


def _document(path: Path) -> tuple[str, str]:
    lines = path.read_text().strip().splitlines()
    return lines[0].lstrip("# ").strip(), " ".join(line.strip() for line in lines[1:]).strip()


async def _pace(ctx: StepContext, done: int, total: int, message: str, depth: int = 1) -> None:
    pace = float(ctx.metadata.get("pace", 0)) * depth
    if pace:
        await asyncio.sleep(pace)
    await ctx.progress(done / total, message)


@app.tool(heartbeat=0.5)
async def search(ctx: StepContext, query: Query) -> Found:
    """Rank the documents of the corpus by how many query terms they contain."""
    wanted = terms(query.query)
    if not wanted:
        raise TerminalError(f"the query {query.query!r} has no searchable words")
    paths = sorted(CORPUS.glob("*.md"))
    hits = []
    for done, path in enumerate(paths, start=1):
        title, text = _document(path)
        score = len(wanted & terms(title + " " + text))
        if score:
            hits.append(Hit(title=title, path=path.name, score=score, text=text))
        await _pace(ctx, done, len(paths), f"read {path.name}", query.depth)
    hits.sort(key=lambda hit: (-hit.score, hit.title))
    return Found(query=query.query, hits=hits[: query.limit])


@app.tool(heartbeat=0.5)
async def summarize(ctx: StepContext, found: Found) -> Summary:
    """Keep the two sentences of each hit that share the most words with the query."""
    wanted = terms(found.query)
    points = []
    for done, hit in enumerate(found.hits, start=1):
        sentences = _SENTENCE.split(hit.text)
        ranked = sorted(sentences, key=lambda s: -len(wanted & terms(s)))
        points += [Point(source=hit.title, sentence=s) for s in ranked[:2]]
        await _pace(ctx, done, len(found.hits), f"summarized {hit.title}")
    return Summary(query=found.query, points=points)


@app.tool(heartbeat=0.5)
async def write_report(ctx: StepContext, summary: Summary) -> dict[str, Any]:
    """Write the summary as a Markdown report; returns where it is."""
    path = Path(str(ctx.metadata.get("out_dir", "tether-reports"))) / f"{ctx.task_id}.md"
    lines = [f"# Research report: {summary.query}", ""]
    sources: dict[str, list[str]] = {}
    for point in summary.points:
        sources.setdefault(point.source, []).append(point.sentence)
    for source, sentences in sources.items():
        lines += [f"## {source}", "", *[f"- {s}" for s in sentences], ""]
    lines += [f"_Task `{ctx.task_id}`, written by Tether on attempt {ctx.attempt}._", ""]
    text = "\n".join(lines)
    written = await asyncio.to_thread(_write, path, text)
    return {"path": str(written), "words": len(text.split()), "sources": len(sources)}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path.resolve()


researcher = app.add(
    Agent(
        "researcher",
        model=OpenAIModel(
            os.environ.get("TETHER_DEMO_MODEL", "gpt-4o-mini"),
            base_url=os.environ.get("TETHER_DEMO_BASE_URL") or None,
            base_url_from=os.environ.get("TETHER_DEMO_BASE_URL_FROM"),
        ),
        instructions=(
            "You answer questions about running AI agents in production. Search the corpus "
            "(several searches at once when the question has several sides), then answer in "
            "one paragraph that names your sources."
        ),
        tools=["search"],
        max_turns=8,
    )
)
