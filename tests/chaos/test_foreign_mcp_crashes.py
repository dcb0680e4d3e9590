"""An Agents SDK agent's and a Pydantic AI agent's MCP tool calls (a real MCP server, the
`mcp` package's, in its own process) are durable units: the worker SIGKILLed while its
second call is in flight, a new worker finishes the run without sending the finished
call again, and sends the cut one again only when the tool's annotations say that is
safe; otherwise the model is told its outcome is unknown, as Tether's own agent does
(tests/integration/test_mcp_tools.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.apps.mcp_server import McpServer
from tests.foreign_agents import Crashes, call, turns
from tether import Client, NatsConfig, TaskHandle
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sdk_client")]
APP = "tests.apps.foreign_mcp:app"


@pytest.fixture
async def crashes(
    config: NatsConfig,
    dispatcher: object,
    mcp_server: McpServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Crashes:
    return await Crashes(config, APP, tmp_path, monkeypatch).register()


@pytest.mark.parametrize("agent", ["oai_clerk", "pai_clerk"])
@pytest.mark.parametrize(
    ("tool", "sent", "told"),
    [
        ("reserve", 2, "reserved "),  # idempotentHint: sent again
        ("charge", 1, "the outcome of this call of charge is unknown"),  # neither: once
    ],
)
async def test_an_mcp_call_cut_off_by_sigkill_is_sent_again_only_when_safe(
    crashes: Crashes,
    client: Client,
    model: ScriptedModel,
    mcp_server: McpServer,
    agent: str,
    tool: str,
    sent: int,
    told: str,
) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"  # this test's own arguments: the server outlives it
    arguments = {"room": tag} if tool == "reserve" else {"account": tag, "cents": 500}
    question = model.conversation(
        call("lookup", query=tag), call(tool, **arguments), {"content": "Done."}
    )

    async def in_flight(handle: TaskHandle) -> None:
        await wait_until(
            lambda: mcp_server.count(tool, **arguments) == 1,
            timeout=60,  # a worker process's start, under the suite's load
            message=f"the {tool} call to reach the server",
        )

    with mcp_server.hold(tool):
        handle = await crashes.killed_when(lambda: client.submit_agent(agent, question), in_flight)
    assert await crashes.survive(handle) == "Done."

    assert mcp_server.count("lookup", query=tag) == 1  # finished before the kill: journaled
    assert mcp_server.count(tool, **arguments) == sent
    last = model.requests(question)[-1]["last"]
    assert last["role"] == "tool" and told in last["text"], last
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
