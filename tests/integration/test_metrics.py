"""Prometheus metrics of a worker and a dispatcher, counted from what each one writes,
read back through prometheus-client's own HTTP exposition."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.apps.agents import app as agents
from tests.apps.tools import app
from tether import Client, Dispatcher, NatsConfig, Step, TaskFailedError, Worker
from tether.metrics import Metrics
from tether.testing import eventually
from tether.testing.llm import ScriptedModel


@pytest.fixture
async def served(
    config: NatsConfig, model: ScriptedModel
) -> AsyncIterator[tuple[Metrics, Metrics]]:
    """A dispatcher and a worker (test tools and agents), each with its own metrics."""
    dispatching, working = Metrics(), Metrics()
    async with (
        Dispatcher(config, metrics=dispatching),
        Worker([app, agents], config, metrics=working),
    ):
        yield dispatching, working


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_steps_tasks_retries_and_dead_letters_are_counted(
    client: Client, served: tuple[Metrics, Metrics]
) -> None:
    _, working = served
    submitting = Metrics()  # a client records the tasks it submits itself
    client.count_into(submitting)
    await (await client.submit(["fast", "fast"])).wait(timeout=20)
    await (await client.submit([Step(tool="flaky", input={"succeed_on": 2})])).wait(timeout=20)
    with pytest.raises(TaskFailedError):
        await (await client.submit(["broken"])).wait(timeout=20)

    assert _value(submitting, "tether_tasks_submitted_total") == 3

    async def failed_for_good() -> None:  # the attempt ends once its message is settled
        assert _value(working, "tether_steps_total", tool="broken", outcome="failed") == 1

    await eventually(failed_for_good, timeout=5)
    assert _value(working, "tether_steps_total", tool="fast", outcome="completed") == 2
    assert _value(working, "tether_steps_total", tool="flaky", outcome="retried") == 1
    assert _value(working, "tether_steps_total", tool="flaky", outcome="completed") == 1
    assert _value(working, "tether_steps_total", tool="broken", outcome="retried") == 2
    assert _value(working, "tether_dead_letters_total", tool="broken") == 1
    assert _value(working, "tether_tasks_finished_total", outcome="completed") == 2
    assert _value(working, "tether_tasks_finished_total", outcome="failed") == 1
    assert _value(working, "tether_steps_started_total", tool="fast") == 2
    assert _value(working, "tether_step_duration_seconds_count", tool="fast") == 2
    assert _value(working, "tether_steps_in_flight", tool="fast") == 0


async def test_llm_tokens_by_model_and_type(
    client: Client, served: tuple[Metrics, Metrics], model: ScriptedModel
) -> None:
    _, working = served
    before = _value(working, "tether_llm_tokens_total", model="scripted", type="input")
    usage = {"prompt_tokens": 70, "completion_tokens": 7, "cached_tokens": 30}
    turns = [{"content": "The answer.", "usage": usage}]
    model.load({"conversations": [{"match": "metrics question", "turns": turns}]})

    await (await client.submit_agent("researcher", "metrics question")).wait(timeout=30)

    after = _value(working, "tether_llm_tokens_total", model="scripted", type="input")
    assert after - before == 70
    assert _value(working, "tether_llm_tokens_total", model="scripted", type="cached") >= 30


async def test_the_http_endpoint_serves_the_tools_backlog_and_reconnects(
    client: Client, served: tuple[Metrics, Metrics]
) -> None:
    _, working = served
    port = working.serve(0)

    async def scraped() -> None:
        families = _scrape(port)
        pending = families["tether_consumer_pending_messages"]
        assert {s.labels["tool"] for s in pending.samples} >= {"fast", "researcher"}
        assert families["tether_nats_reconnects"].samples[0].value == 0
        assert "process_cpu_seconds" in families

    await eventually(scraped, timeout=10)


def _scrape(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


async def test_an_attempt_that_ends_without_an_event_leaves_nothing_in_flight(
    config: NatsConfig, client: Client
) -> None:
    """Cancelled mid-run, waiting for input, started a child, handed on at a stop: none
    of these emits an event that ends the attempt, and each ends it all the same."""
    working = Metrics()

    def in_flight(tool: str) -> float:
        return _value(working, "tether_steps_in_flight", tool=tool)

    async def none_in_flight(*tools: str) -> None:
        assert [in_flight(tool) for tool in tools] == [0] * len(tools)

    async with Dispatcher(config):
        async with Worker(app, config, metrics=working):
            cancelled = await client.submit([Step(tool="slow", input={"sleep": 30})])
            await eventually(lambda: _assert_one(in_flight("slow")), timeout=10)
            await cancelled.cancel()
            asking = await client.submit(["asks"])
            await asking.wait_for(lambda r: r.status.value == "waiting", timeout=10)
            parent = await client.submit([Step(tool="delegates", input={"steps": ["fast"]})])
            await parent.wait(timeout=20)
            tools = ("slow", "asks", "delegates", "fast")
            await eventually(lambda: none_in_flight(*tools), timeout=10)
            assert _value(working, "tether_steps_total", tool="slow", outcome="cancelled") == 1
            assert _value(working, "tether_steps_total", tool="asks", outcome="waiting") == 1
            assert _value(working, "tether_steps_total", tool="delegates", outcome="child") == 1

        grace = timedelta(seconds=0.2)
        working = Metrics()
        async with Worker(app, config, metrics=working, shutdown_grace=grace):
            await client.submit([Step(tool="slow", input={"sleep": 30})])
            await eventually(lambda: _assert_one(in_flight("slow")), timeout=10)
    assert in_flight("slow") == 0
    assert _value(working, "tether_steps_total", tool="slow", outcome="handed_on") == 1


async def _assert_one(value: float) -> None:
    assert value == 1
