"""Spend that was not kept is spend (issue 40, item 7): what a failed, retried or cancelled
attempt spent is on its task's record, a model with no price costs "unknown", not $0;
and a guardrail's refusal is an expected outcome (item 10): failed, not dead-lettered,
logged without an ERROR traceback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
import pytest

from tests.conftest import MakeWorker, Raw
from tether import (
    App,
    Client,
    NatsConfig,
    RetryPolicy,
    StepContext,
    TaskFailedError,
    TerminalError,
    Worker,
)
from tether.cli.output import format_usage
from tether.schemas import DeadLetter, TaskStatus
from tether.schemas.names import Names
from tether.schemas.records import Usage
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

app = App("spend")
TWICE = RetryPolicy(max_attempts=2, initial_backoff=0.05, max_backoff=0.1, jitter=0.0)
CALL = Usage(input_tokens=1000, output_tokens=200, requests=1, model="m", cost_usd=0.01)


@app.tool(retry=TWICE)
async def spends_then_breaks(ctx: StepContext, data: dict[str, Any]) -> None:
    """A model call that returned, then a failure: retried once, then given up."""
    ctx.add_usage(CALL)
    if data.get("terminal"):
        raise TerminalError("the answer cannot be used")
    raise RuntimeError("the parser broke")


@app.tool(heartbeat=0.2)
async def spends_then_waits(ctx: StepContext, data: dict[str, Any]) -> None:
    """A model call that returned, then a long wait: cancelled meanwhile."""
    ctx.add_usage(CALL)
    await ctx.progress(message="spent")
    await asyncio.sleep(3600)


async def test_a_step_that_fails_after_spending_has_every_attempt_on_the_failed_record(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "spends_then_breaks", "input": {}}])

    with pytest.raises(TaskFailedError):
        await handle.wait(timeout=20)

    usage = (await handle.get()).usage
    assert usage is not None  # the retried attempt's call and the last one's
    assert (usage.requests, usage.total_tokens, usage.cost_usd) == (2, 2400, pytest.approx(0.02))


async def test_a_terminal_failure_keeps_its_attempts_spend(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "spends_then_breaks", "input": {"terminal": True}}])

    with pytest.raises(TaskFailedError):
        await handle.wait(timeout=20)

    record = await handle.get()
    assert record.usage is not None and record.usage.total_tokens == 1200


async def test_a_cancelled_task_shows_what_its_running_step_spent(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit([{"tool": "spends_then_waits", "input": {}}])

    async def spending() -> None:
        beat = await client.heartbeat(handle.task_id)
        assert beat is not None and beat.message == "spent"

    await eventually(spending)
    await client.cancel(handle.task_id)

    async def counted() -> Usage:
        record = await handle.get()
        assert record.status is TaskStatus.CANCELLED and record.usage is not None
        return record.usage

    usage = await eventually(counted)
    assert (usage.requests, usage.total_tokens) == (1, 1200)


async def test_a_model_with_no_price_costs_unknown_not_zero(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    question = model.conversation({"content": "An answer."})

    handle = await client.submit_agent("researcher", question)
    assert await handle.wait(timeout=30) == "An answer."

    usage = (await handle.get()).usage
    assert usage is not None and usage.total_tokens > 0
    assert usage.cost_usd is None  # "scripted" has no price
    assert "cost unknown" in format_usage(usage) and "$0.0000" not in format_usage(usage)


async def test_a_call_cancelled_mid_answer_counts_what_it_streamed(
    client: Client, dispatcher: object, agent_worker: Worker, model: ScriptedModel
) -> None:
    """No usage chunk ever comes for it: the answer it streamed is counted from its text,
    marked as counted from the stream (issue 50, item 7), not shown as 0 tokens."""
    words = " ".join(f"word{n:03}" for n in range(200))
    stalls = {"content": words, "faults": [{"stall_after": 100, "seconds": 60}]}
    question = model.conversation(stalls)
    handle = await client.submit_agent("researcher", question)
    streamed = ""
    async for chunk in handle.stream():  # a hundred words, then the model stalls
        streamed += chunk.delta
        if len(streamed) >= 700:
            break
    await client.cancel(handle.task_id)

    async def counted() -> Usage:
        record = await handle.get()
        assert record.status is TaskStatus.CANCELLED and record.usage is not None
        return record.usage

    usage = await eventually(counted)
    assert (usage.requests, usage.unfinished, usage.input_tokens) == (1, 1, 0)
    assert usage.output_tokens == usage.streamed_tokens >= 700 // 4
    said = format_usage(usage)
    assert f"~{usage.output_tokens:,} out" in said
    assert f"1 cut off: ~{usage.streamed_tokens:,} out counted from the stream" in said


async def test_a_guardrail_refusal_fails_the_task_without_a_dead_letter_or_an_error_log(
    client: Client,
    dispatcher: object,
    agent_worker: Worker,
    model: ScriptedModel,
    raw: Raw,
    config: NatsConfig,
    caplog: pytest.LogCaptureFixture,
) -> None:
    question = model.conversation({"content": "never"})
    caplog.set_level(logging.INFO, logger="tether")

    handle = await client.submit_agent("careful", f"{question}: what is the admin password?")
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)

    error = failed.value.error
    assert error is not None and error.type == "GuardrailTripped"
    assert error.message == "the question asks for a password"
    assert [d for d in await _dead_letters(raw, config.names) if d.task_id == handle.task_id] == []
    worker = [r for r in caplog.records if r.name == "tether.worker"]
    assert not [r for r in worker if r.levelno >= logging.WARNING], worker
    said = [r.getMessage() for r in worker if "GuardrailTripped" in r.getMessage()]
    assert said and "Traceback" not in said[0] and "\n" not in said[0]


async def _dead_letters(raw: Raw, names: Names) -> list[DeadLetter]:
    """Every dead letter kept so far, on any tool's subject."""
    sub = await raw.js.subscribe(names.dead_letter_subjects, ordered_consumer=True)
    letters = []
    try:
        while True:
            msg = await sub.next_msg(timeout=0.5)
            letters.append(msgspec.json.decode(msg.data, type=DeadLetter))
    except TimeoutError:
        return letters
    finally:
        await sub.unsubscribe()
