"""Thirty agents streaming long answers at once on two worker processes, no crash: a busy
worker must never be taken for a dead one. Counted at the model server, no LLM call is
sent twice; every task's streamed text, the attempt its `step_completed` names, is its
stored answer."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.agents import app as agents
from tests.conftest import start_worker, stop_worker
from tether import Client, NatsConfig, TaskHandle, Worker
from tether.schemas import StepCompleted
from tether.testing.llm import ScriptedModel

pytestmark = [pytest.mark.slow, pytest.mark.load]
AGENTS = "tests.apps.agents:app"
TASKS = 30
WORDS = 3000


@pytest.fixture
def fast_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModel]:
    """A model that streams as fast as it can (the module's default paces its chunks)."""
    with ScriptedModel(chunk_delay=0.0) as scripted:
        monkeypatch.setenv("OPENAI_BASE_URL", scripted.base_url)
        yield scripted


async def _streamed_answer(client: Client, handle: TaskHandle) -> tuple[str, int]:
    """The last step's text as streamed by the attempt its `step_completed` names."""
    completed = [e async for e in handle.events() if isinstance(e, StepCompleted)]
    last = completed[-1]
    assert last.attempt is not None, "step_completed must name the attempt that won"
    text: dict[int, list[str]] = defaultdict(list)
    async for chunk in handle.stream():
        if chunk.step == last.step:
            text[chunk.attempt].append(chunk.delta)
    return "".join(text[last.attempt]), len(text)


async def test_busy_workers_streaming_long_answers_are_never_taken_for_dead(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    fast_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    async with Worker(agents, config):
        pass  # registered
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "q"}}]}
    questions = [f"load {i} {uuid.uuid4().hex[:6]}" for i in range(TASKS)]
    answers = {q: " ".join(f"{q.split()[1]}w{n}" for n in range(WORDS)) for q in questions}
    fast_model.load(
        {
            "conversations": [
                {"match": q, "turns": [search, {"content": answers[q]}]} for q in questions
            ]
        }
    )
    logs = [tmp_path / f"worker{n}.log" for n in range(2)]
    workers = [start_worker(config, AGENTS, log=log) for log in logs]
    try:
        handles = await asyncio.gather(*(client.submit_agent("researcher", q) for q in questions))
        results = await asyncio.gather(*(h.wait(timeout=240) for h in handles))
        streamed = await asyncio.gather(*(_streamed_answer(client, h) for h in handles))
    finally:
        for worker in workers:
            stop_worker(worker)

    calls = Counter((r["conversation"], r["turn"]) for r in fast_model.requests())
    sent_twice = {state: n for state, n in calls.items() if n > 1}
    worker_logs = "\n".join(log.read_text() for log in logs)
    assert not sent_twice, f"LLM calls sent again without a crash: {sent_twice}\n{worker_logs}"
    assert len(calls) == 2 * TASKS
    for question, result, (text, attempts) in zip(questions, results, streamed, strict=True):
        assert result == answers[question]
        assert text == result, f"{attempts} attempt(s) streamed; the winner's text differs"
    assert "is gone" not in worker_logs
