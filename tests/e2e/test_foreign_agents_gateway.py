"""Pydantic AI and OpenAI Agents SDK agents added to an app are MCP tools of `tether
gateway` (real gateway and worker processes): listed with their schemas, called from
the official `mcp` client they answer with their tools called, and run as MCP tasks
their approval is an `input_required` task, answered by elicitation (2025-11-25) or
by `tasks/update` (2026-07-28)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from tests.foreign_agents import OPENAI_AGENTS, PYDANTIC_AGENTS, call, ran, turns
from tether import NatsConfig
from tether.mcp_tasks import update_task
from tether.schemas.names import Names
from tether.testing.llm import ScriptedModel


@dataclass(frozen=True)
class Framework:
    """The agents one framework's test app serves, and how to script them."""

    helper: str
    """An agent with tools, one of them approved by a person first."""
    tool: dict[str, Any]
    """A call of one of the helper's tools."""
    approved: str
    """The tool that asks a person first, and its one argument."""
    argument: str
    forecaster: str
    """A typed agent, and an integer field of its output."""
    field: str

    def approval(self) -> tuple[dict[str, Any], str]:
        """A call of the approved tool on a new target, and the line its run records."""
        target = f"t{uuid.uuid4().hex[:8]}"
        return call(self.approved, **{self.argument: target}), f"{self.approved} {target}"


OPENAI = Framework(
    helper="oai_helper",
    tool=call("get_weather", city="Oslo"),
    approved="delete_file",
    argument="path",
    forecaster="oai_forecaster",
    field="celsius",
)
PYDANTIC = Framework(
    helper="pai_helper",
    tool=call("add", a=4, b=5),
    approved="delete_rows",
    argument="table",
    forecaster="pai_forecaster",
    field="degrees",
)
FRAMEWORKS = pytest.mark.parametrize("framework", [OPENAI, PYDANTIC], ids=["openai", "pydantic"])


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"fg{uuid.uuid4().hex[:10]}"


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
    """One worker process serving both frameworks' agents, and the gateway."""
    apps, tools = [OPENAI_AGENTS, PYDANTIC_AGENTS], [OPENAI.helper, PYDANTIC.helper]
    async with serving(stack, apps, tools, logs) as url:
        yield url


@pytest.fixture(scope="module")
def executions(logs: Path) -> Path:
    return stack_executions(logs)


@FRAMEWORKS
async def test_an_agent_is_an_mcp_tool(
    gateway: str, model: ScriptedModel, framework: Framework
) -> None:
    question = model.conversation(framework.tool, {"content": "It is 9."})

    async with legacy(gateway) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool(framework.helper, {"input": question})

    assert tools[framework.helper].input_schema["required"] == ["input"]
    forecast = tools[framework.forecaster].output_schema
    assert forecast is not None and forecast["properties"][framework.field]["type"] == "integer"
    assert result.structured_content == {"result": "It is 9."}


@FRAMEWORKS
async def test_an_approval_is_input_required_and_elicitation_answers_it(
    gateway: str, model: ScriptedModel, executions: Path, framework: Framework
) -> None:
    approval, line = framework.approval()
    question = model.conversation(approval, {"content": "Deleted."})
    task_id = await start_legacy_task(gateway, framework.helper, {"input": question})
    waiting = await poll(gateway, LEGACY, task_id, {"input_required"})
    assert line.split()[1] in waiting["statusMessage"]

    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approved": True})

    async with legacy(gateway, elicitation_callback=answer) as client:
        result = await tasks_call(client.session, "tasks/result", task_id)

    assert result["structuredContent"] == {"result": "Deleted."}
    assert ran(executions, line) == 1
    assert [r["turn"] for r in model.requests(question)] == [0, 1]


@FRAMEWORKS
async def test_an_agent_runs_as_a_2026_task_and_tasks_update_answers_its_approval(
    gateway: str, model: ScriptedModel, executions: Path, framework: Framework
) -> None:
    approval, line = framework.approval()
    question = model.conversation(framework.tool, approval, {"content": "Done."})
    task_id = await start_modern_task(gateway, framework.helper, {"input": question})
    waiting = await poll(gateway, MODERN, task_id, {"input_required"})
    [(key, request)] = waiting["inputRequests"].items()
    assert line.split()[1] in request["params"]["message"]
    assert ran(executions, line) == 0  # not before the answer

    async with modern(gateway) as client:
        accept = {"action": "accept", "content": {"approved": True}}
        ack = await update_task(client, task_id, {key: accept})
    assert ack["resultType"] == "complete"

    done = await poll(gateway, MODERN, task_id, {"completed"})
    assert done["result"]["structuredContent"] == {"result": "Done."}
    assert ran(executions, line) == 1
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}  # none sent again on resume
