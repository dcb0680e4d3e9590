"""A LangGraph graph added to an app is an MCP tool of `tether gateway` (real gateway and
worker processes): listed to the official `mcp` client, called and answered, and run
as an MCP task whose `interrupt()` is `input_required`, answered by elicitation
(2025-11-25) or by `tasks/update` (2026-07-28)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext

from tests.e2e.gateway_stack import executions as stack_executions
from tests.e2e.gateway_stack import serving
from tests.e2e.test_gateway import (
    LEGACY,
    MODERN,
    legacy,
    modern,
    poll,
    start_legacy_task,
    start_modern_task,
    tasks_call,
)
from tests.foreign_agents import ran
from tether import NatsConfig
from tether.mcp_tasks import update_task
from tether.schemas.names import Names
from tether.testing.llm import ScriptedModel

APP = "tests.apps.langgraph_agents:app"


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"lg{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def stack(nats_url: str, prefix: str) -> NatsConfig:
    return NatsConfig(url=nats_url, names=Names(prefix=prefix))


@pytest.fixture(autouse=True)
def _dispatching(dispatcher: object, api: object) -> None:
    """The dispatcher records the gateway's submissions; the API answers for it."""


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="module")
async def gateway(stack: NatsConfig, model: ScriptedModel, logs: Path) -> AsyncIterator[str]:
    async with serving(stack, [APP], ["lg_react"], logs) as url:
        yield url


@pytest.fixture(scope="module")
def executions(logs: Path) -> Path:
    return stack_executions(logs)


async def test_a_graph_is_listed_and_answers_an_mcp_call(
    gateway: str, model: ScriptedModel, executions: Path
) -> None:
    add = {"name": "add", "arguments": {"a": 4, "b": 5}}
    question = model.conversation({"tool_calls": [add]}, {"content": "It is 9."})

    async with legacy(gateway) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("lg_react", {"input": question})

    assert {"lg_react", "lg_outline"} <= tools.keys()
    assert tools["lg_react"].input_schema["required"] == ["input"]
    assert result.structured_content == {"result": "It is 9."}
    assert ran(executions, "add 4 5") == 1
    assert [r["turn"] for r in model.requests(question)] == [0, 1]


async def test_an_interrupt_is_input_required_and_elicitation_answers_it(
    gateway: str, executions: Path
) -> None:
    topic = f"t{uuid.uuid4().hex[:8]}"
    task_id = await start_legacy_task(gateway, "lg_outline", {"input": {"topic": topic}})
    waiting = await poll(gateway, LEGACY, task_id, {"input_required"})
    assert f"{topic}: why" in waiting["statusMessage"]
    asked: list[types.ElicitRequestParams] = []

    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approved": True})

    async with legacy(gateway, elicitation_callback=answer) as client:
        result = await tasks_call(client.session, "tasks/result", task_id)

    sections = [f"{topic}: why", f"{topic}: how"]
    assert result["structuredContent"] == {"topic": topic, "sections": sections, "approved": True}
    [form] = asked
    assert form.requested_schema["properties"] == {"approved": {"type": "boolean"}}
    assert ran(executions, f"draft {topic}") == 1  # the node before the interrupt: once


async def test_a_graph_runs_as_a_2026_task_answered_by_tasks_update(
    gateway: str, executions: Path
) -> None:
    topic = f"t{uuid.uuid4().hex[:8]}"
    task_id = await start_modern_task(gateway, "lg_outline", {"input": {"topic": topic}})
    waiting = await poll(gateway, MODERN, task_id, {"input_required"})
    [(key, request)] = waiting["inputRequests"].items()
    assert f"{topic}: how" in request["params"]["message"]

    async with modern(gateway) as client:
        ack = await update_task(
            client, task_id, {key: {"action": "accept", "content": {"approved": False}}}
        )
    assert ack["resultType"] == "complete"

    done = await poll(gateway, MODERN, task_id, {"completed"})
    sections = [f"{topic}: why", f"{topic}: how"]
    final = done["result"]["structuredContent"]
    assert final == {"topic": topic, "sections": sections, "approved": False}
    assert ran(executions, f"draft {topic}") == 1
