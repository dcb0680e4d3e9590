"""The seed's task end to end: search → summarize → write_report on a real nats-server."""

from __future__ import annotations

from tests.apps.tools import app
from tests.conftest import MakeWorker
from tether import Client, NatsConfig
from tether.schemas import Completed, StepCompleted, StepStarted, Submitted, TaskStatus

SEED = [
    {"tool": "search", "input": {"query": "AI trends 2026"}},
    {"tool": "summarize"},
    {"tool": "write_report"},
]


async def test_seed_task_completes_with_inputs_flowing(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit(SEED, task_id="report-42", metadata={"user": "alice"})

    result = await handle.wait(timeout=20)

    summary = "agents run for hours; durable execution matters; MCP tasks"
    assert result == {"report": f"# Report\n\n{summary}\n", "sources": 3}
    record = await client.get("report-42")
    assert record.status is TaskStatus.COMPLETED
    assert record.result == result
    assert record.current_step == 3
    assert record.metadata == {"user": "alice"}


async def test_status_events_arrive_in_order(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    handle = await client.submit(SEED)
    await handle.wait(timeout=20)

    events = [event async for event in handle.events(timeout=5)]

    kinds = [(type(e).__name__, e.step) for e in events]
    assert kinds == [
        ("Submitted", None),
        ("StepStarted", 0),
        ("StepCompleted", 0),
        ("StepStarted", 1),
        ("StepCompleted", 1),
        ("StepStarted", 2),
        ("StepCompleted", 2),
        ("Completed", None),
    ]
    assert isinstance(events[0], Submitted) and events[0].status is TaskStatus.PENDING
    assert isinstance(events[1], StepStarted) and events[1].tool == "search"
    assert isinstance(events[2], StepCompleted) and events[2].output == [
        "agents run for hours",
        "durable execution matters",
        "MCP tasks",
    ]
    assert isinstance(events[-1], Completed) and events[-1].status is TaskStatus.COMPLETED


async def test_a_late_client_finds_the_finished_task(
    config: NatsConfig, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    async with Client(config) as first:
        handle = await first.submit(SEED, task_id="come-back-later")
    # The first client is gone; a new one asks by id.
    async with Client(config) as second:
        result = await second.handle("come-back-later").wait(timeout=20)
        assert result["sources"] == 3
        events = [e async for e in second.handle("come-back-later").events(timeout=5)]
    assert isinstance(events[-1], Completed)
    assert handle.task_id == "come-back-later"
