"""A Node.js client, using only the official NATS packages, drives Tether end to end."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.agents import app as agents_app
from tests.apps.tools import app
from tests.conftest import MakeWorker
from tether import NatsConfig, Worker
from tether.testing.llm import ScriptedModel

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "client.mjs"
SUMMARY = "agents run for hours; durable execution matters; MCP tasks"
SEED_EVENTS = [
    ["submitted", None],
    ["step_started", 0],
    ["step_completed", 0],
    ["step_started", 1],
    ["step_completed", 1],
    ["step_started", 2],
    ["step_completed", 2],
    ["completed", None],
]


@pytest.fixture
async def agents_worker(config: NatsConfig, model: ScriptedModel) -> AsyncIterator[Worker]:
    async with Worker(agents_app, config) as w:
        yield w


async def run_client(
    node: str, config: NatsConfig, *flags: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run client.mjs against the test's server and prefix; return its JSON summary."""
    proc = await asyncio.create_subprocess_exec(
        node,
        str(CLIENT),
        config.url,
        config.names.prefix,
        *flags,
        cwd=HERE,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=90)
    except TimeoutError:
        proc.kill()
        await proc.communicate()
        pytest.fail("the Node.js client did not finish within 90s")
    assert proc.returncode == 0, f"client.mjs exited {proc.returncode}:\n{err.decode()}"
    lines = out.decode().strip().splitlines()
    assert lines, f"client.mjs printed no summary; stderr:\n{err.decode()}"
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def assert_seed_task(summary: dict[str, Any]) -> None:
    assert summary["task_id"].startswith("node-")
    assert summary["parallel_branches"] == [0, 1]
    assert len(summary["parallel_result"]) == 2  # one list entry per branch, in order
    assert summary["parallel_result"][0] != summary["parallel_result"][1]
    assert summary["events"] == SEED_EVENTS
    assert summary["result"] == {"report": f"# Report\n\n{SUMMARY}\n", "sources": 3}
    assert summary["record_status"] == "completed"


async def test_node_client_submits_follows_and_reads_the_record(
    node: str, config: NatsConfig, dispatcher: object, make_worker: MakeWorker
) -> None:
    """Streams and KV only: no request/reply API is running."""
    await make_worker(app)
    summary = await run_client(node, config, "--no-api")

    assert_seed_task(summary)
    assert "api_get_status" not in summary


async def test_node_client_uses_the_request_reply_api(
    node: str, config: NatsConfig, dispatcher: object, make_worker: MakeWorker, api: None
) -> None:
    """Under an inbox prefix of its own, as `deploy/nats/roles.conf` requires of each role:
    the API's replies come back to it."""
    await make_worker(app)
    summary = await run_client(node, config, env={"TETHER_NATS_INBOX_PREFIX": "_INBOX_node"})

    assert_seed_task(summary)
    assert summary["inbox_prefix"] == "_INBOX_node"
    assert summary["api_get_status"] == "completed"
    assert summary["cancelled_task_id"] != summary["task_id"]
    assert summary["cancel_status"] == "cancelled"
    assert summary["cancel_events"] == [
        ["submitted", None],
        ["step_started", 0],
        ["cancelled", None],
    ]
    assert summary["unknown_error_code"] == "not_found"


SEARCH = {"tool_calls": [{"name": "web_search", "arguments": {"query": "durable agents"}}]}
ANSWER = "Durable agents checkpoint every step in JetStream and resume after a crash."


async def test_node_client_follows_an_agents_tokens_and_resumes_without_repeats(
    node: str,
    config: NatsConfig,
    dispatcher: object,
    agents_worker: Worker,
    model: ScriptedModel,
) -> None:
    """Turn 0 asks for a tool and says nothing, so the only text is turn 1's answer
    (step 2: turn 0, the tool call's group, turn 1), streamed word by word."""
    question = f"question {uuid.uuid4().hex[:8]}"
    turns = [SEARCH, {"content": ANSWER}]
    # A word per 30 ms: each goes out as a chunk of its own (text is batched per 25 ms).
    model.load({"chunk_delay": 0.03, "conversations": [{"match": question, "turns": turns}]})

    summary = await run_client(node, config, "--agent", question)

    assert summary["status"] == "completed"
    assert summary["result"] == ANSWER
    assert summary["text"] == ANSWER
    chunks = [tuple(chunk) for chunk in summary["chunks"]]
    assert len(chunks) > 3  # word by word, so the resume after 2 chunks is mid-answer
    assert len(set(chunks)) == len(chunks)  # nothing repeated across the resume
    assert chunks == [(2, 1, seq) for seq in range(len(chunks))]  # nothing lost
    seqs = summary["stream_seqs"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # increasing, no gaps
    assert summary["resumed_after"] == seqs[1]  # the second consumer took over after 2


async def test_node_client_chats_in_a_session_from_the_protocol_page(
    node: str,
    config: NatsConfig,
    dispatcher: object,
    agents_worker: Worker,
    model: ScriptedModel,
) -> None:
    """Sends to a new session (a repeat is a duplicate), follows its run boundaries and each
    run's tokens, and a second message to the idle session starts the next run."""
    first = f"session {uuid.uuid4().hex[:8]}"
    turns = [{"content": "One."}, {"content": "Two."}]
    model.load({"conversations": [{"match": first, "turns": turns}]})

    summary = await run_client(node, config, "--session", first)

    session_id = summary["session_id"]
    runs = [(r["run"], r["task_id"], r["after"], r["text"], r["status"]) for r in summary["runs"]]
    assert runs == [
        (1, f"{session_id}-r1", None, "One.", "completed"),
        (2, f"{session_id}-r2", f"{session_id}-r1", "Two.", "completed"),
    ]
    assert summary["m2_taken_by"] == f"{session_id}-r2"
    assert model.requests(first)[-1]["user_texts"] == [first, "And then?"]
