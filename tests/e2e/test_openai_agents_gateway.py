"""An OpenAI Agents SDK agent added to an app is an MCP tool of `tether gateway` (real gateway and
worker processes): called from the official `mcp` client it answers with its tools
called, and its approval is an `input_required` task answered by elicitation."""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext

from tests.conftest import start_worker, stop_worker
from tests.e2e.test_gateway import (
    LEGACY,
    _start_gateway,
    legacy,
    poll,
    start_legacy_task,
    tasks_call,
)
from tether import Client, NatsConfig
from tether.schemas.names import Names
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

APP = "tests.apps.openai_agents:app"


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"og{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def stack(nats_url: str, prefix: str) -> NatsConfig:
    return NatsConfig(url=nats_url, names=Names(prefix=prefix))


@pytest.fixture(autouse=True)
def _dispatching(dispatcher: object, api: object) -> None:
    """The dispatcher records the gateway's submissions; the API answers for it."""


@pytest.fixture(scope="module")
def executions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("executions") / "executions.log"
    path.touch()
    return path


@pytest.fixture(scope="module")
def worker(
    stack: NatsConfig,
    model: ScriptedModel,
    executions: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TETHER_TEST_EXECUTIONS", str(executions))
        log = tmp_path_factory.mktemp("worker") / "worker.log"
        process = start_worker(stack, APP, log=log)
    yield
    stop_worker(process)


@pytest.fixture(scope="module")
async def gateway(
    stack: NatsConfig, worker: None, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    process, log, url = _start_gateway(stack, tmp_path_factory.mktemp("gateway") / "g.log")
    try:
        await wait_until(
            lambda: "MCP gateway serving" in log.read_text() or process.poll() is not None,
            timeout=30,
            message="the gateway to start",
        )
        assert process.poll() is None, log.read_text()
        await wait_until(lambda: _registered(stack), timeout=30, message="the worker")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0, log.read_text()


async def _registered(config: NatsConfig) -> bool:
    async with Client(config) as client:
        return await client._store.tools.get("oai_helper") is not None


async def test_an_openai_agents_sdk_agent_is_an_mcp_tool(
    gateway: str, model: ScriptedModel
) -> None:
    weather = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    question = model.conversation({"tool_calls": [weather]}, {"content": "It is 9."})

    async with legacy(gateway) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("oai_helper", {"input": question})

    assert tools["oai_helper"].input_schema["required"] == ["input"]
    forecast = tools["oai_forecaster"].output_schema
    assert forecast is not None and forecast["properties"]["celsius"]["type"] == "integer"
    assert result.structured_content == {"result": "It is 9."}


async def test_an_approval_is_input_required_and_elicitation_answers_it(
    gateway: str, model: ScriptedModel, executions: Path
) -> None:
    table = f"/tmp/t{uuid.uuid4().hex[:8]}"
    delete = {"name": "delete_file", "arguments": {"path": table}}
    question = model.conversation({"tool_calls": [delete]}, {"content": "Deleted."})
    task_id = await start_legacy_task(gateway, "oai_helper", {"input": question})
    waiting = await poll(gateway, LEGACY, task_id, {"input_required"})
    assert table in waiting["statusMessage"]

    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approved": True})

    async with legacy(gateway, elicitation_callback=answer) as client:
        result = await tasks_call(client.session, "tasks/result", task_id)

    assert result["structuredContent"] == {"result": "Deleted."}
    assert executions.read_text().count(f"delete_file {table}") == 1
    assert [r["turn"] for r in model.requests(question)] == [0, 1]
