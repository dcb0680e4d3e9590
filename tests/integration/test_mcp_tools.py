"""Tools from MCP servers: an agent offers its model what a real MCP server (the `mcp`
package's, in its own process) lists, and makes each call as a durable branch with the
official `mcp` client; a SIGKILL mid-call re-sends it only when the tool says that is safe."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.apps.mcp_agents import make_app
from tests.apps.mcp_server import McpServer
from tests.chaos.crashes import survive
from tests.conftest import MakeWorker, start_worker
from tether import Client, NatsConfig, TaskFailedError
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

APP = "tests.apps.mcp_agents:app"


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


async def test_the_model_is_offered_the_servers_tools_and_their_results(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    mcp_server: McpServer,
) -> None:
    await make_worker(make_app([mcp_server.url]))
    question = model.conversation(
        _call("lookup", query="tides"), _call("fail", reason="no ink"), {"content": "Done."}
    )
    handle = await client.submit_agent("clerk", question)
    assert await handle.wait(timeout=30) == "Done."

    first, second, third = model.requests(question)
    offered = {f["name"]: f for f in first["functions"]}
    assert sorted(offered) == ["charge", "fail", "lookup", "reserve"]
    assert offered["lookup"]["description"] == "Look something up in the catalogue."
    assert offered["charge"]["parameters"]["required"] == ["account", "cents"]
    assert second["last"] == {"role": "tool", "text": "found: tides"}
    assert third["last"]["role"] == "tool"
    assert third["last"]["text"].startswith("Error: ") and "no ink" in third["last"]["text"]
    assert mcp_server.count("lookup", query="tides") == 1


async def test_a_step_naming_another_server_is_refused(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
    mcp_server: McpServer,
) -> None:
    """A step's input names the server: a submitted one cannot send the worker elsewhere."""
    await make_worker(make_app([mcp_server.url]))
    handle = await client.submit(
        [{"tool": "clerk", "input": {"mcp": {"server": "http://169.254.169.254/", "tool": "x"}}}]
    )
    with pytest.raises(TaskFailedError) as failed:
        await handle.wait(timeout=30)
    assert "has no MCP server 'http://169.254.169.254/'" in str(failed.value)


@pytest.mark.parametrize(
    ("tool", "sent", "told"),
    [
        ("reserve", 2, "reserved "),  # idempotentHint (readOnlyHint too): sent again
        ("charge", 1, "the outcome of this call of charge is unknown"),  # neither: once
    ],
)
async def test_a_call_cut_off_by_sigkill_is_sent_again_only_when_safe(
    client: Client,
    dispatcher: object,
    config: NatsConfig,
    model: ScriptedModel,
    mcp_server: McpServer,
    tmp_path: Path,
    tool: str,
    sent: int,
    told: str,
) -> None:
    tag = tmp_path.name  # this test's own arguments: the server outlives it
    arguments = {"room": tag} if tool == "reserve" else {"account": tag, "cents": 500}
    question = model.conversation(_call(tool, **arguments), {"content": "Done."})
    handle = await client.submit_agent("clerk", question)
    with mcp_server.hold():
        doomed = start_worker(config, APP, log=tmp_path / "doomed.log")
        try:
            await wait_until(
                lambda: mcp_server.count(tool, **arguments) == 1,
                timeout=30,
                message=f"the {tool} call to reach the server",
            )
        finally:
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
    assert await survive(config, handle, APP) == "Done."

    assert mcp_server.count(tool, **arguments) == sent
    last = model.requests(question)[-1]["last"]
    assert last["role"] == "tool" and told in last["text"]
    turns = [(r["turn"], r["attempt"]) for r in model.requests(question)]
    assert turns == [(0, 0), (1, 0)]  # no LLM call was sent twice
