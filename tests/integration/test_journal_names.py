"""Operation names are compatibility data (issue 49, item 10): what each framework's
adapter writes to a task's journal, pinned. A finished unit is found again on a replay
by its key and checked by its name, so a framework upgrade (or a change of ours) that
renames a unit, or keys it otherwise, fails every task running across the upgrade with
`JournalDiverged` (or runs its calls again): it must fail here first. As pydantic-ai's
`tests/test_durable_exec_compat.py` pins its engines' names, each adapter runs a small
agent on the scripted model (one tool call, then an answer; a call a person approves; a
call of an MCP server's tool, with the SDK's guardrails), and the test asserts the exact
keys and names its journal holds. `just compat-oldest`
runs this file against the oldest framework versions the extras allow.

A change here is a change of the journal's format: tasks started before it cannot
resume after it. Say so in the release notes, or keep reading the old names.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import (
    GuardrailFunctionOutput,
    function_tool,
    input_guardrail,
    output_guardrail,
    set_default_openai_api,
    set_default_openai_key,
)
from agents.mcp import MCPServerStreamableHttp
from nats.js.errors import NoKeysError
from pydantic_ai import Agent as PaiAgent
from pydantic_ai.mcp import MCPToolset

from tests.apps.langgraph_agents import lg_react
from tests.apps.mcp_server import McpServer
from tests.conftest import MakeWorker, raw_connection
from tests.foreign_agents import waiting
from tether import App, Client, NatsConfig
from tether.integrations.langgraph import graph, graph_live, keys
from tether.integrations.langgraph.graph import as_tool
from tether.integrations.langgraph.graph_saver import bucket_of
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.usefixtures("sdk_client")  # SDK agents run in this process
set_default_openai_api("chat_completions")  # what the scripted model serves
set_default_openai_key("test", use_for_tracing=False)
os.environ.setdefault("OPENAI_API_KEY", "test")


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def remove(path: str) -> str:
    """Remove a file (a person approves it first)."""
    return f"removed {path}"


pai_compat = PaiAgent("openai-chat:gpt-4o-mini", name="pai_compat", defer_model_check=True)
pai_compat.tool_plain(add)
pai_compat.tool_plain(requires_approval=True)(remove)

sdk_compat = SdkAgent(
    name="sdk_compat",
    tools=[function_tool(add), function_tool(remove, needs_approval=True)],
    model="scripted",
)


@input_guardrail
def screen(context: Any, agent: Any, data: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


@output_guardrail
def check(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


CALL = "u000001-667848c66fab3625"
"""The key of the tool call `call_0_0` (the scripted model's id for the first call of
its first turn) that the model call in unit 1 asked for: its place, then the first 16
hex digits of the id's sha256."""
MCP_CALL = "u000002-667848c66fab3625"
"""The same call asked for by the model call in unit 2 (after the toolset's listing)."""
GUARDED_IN = "b000001-9de895fb58f16a80"
GUARDED_OUT = "b000001-119746d370808d19"
"""The keys of the first verdict of the guardrails `screen` (input) and `check` (output):
the first 16 hex digits of the sha256 of `guardrail.input.screen`, `guardrail.output.check`."""

JOURNALS: dict[str, list[tuple[str, str | None]]] = {
    # Pydantic AI's own operation names (its `JournalOperationNamer`), by the agent's name
    "pai_compat": [
        ("0.once._call.u000001", None),
        ("0.once._call.u000004", None),
        ("0.once.u000001", "pai_compat__model.request_stream"),
        (f"0.once.{CALL}", "pai_compat__function_toolset__<agent>.call_tool:add"),
        ("0.once.u000002", "pai_compat__event_stream_handler"),
        ("0.once.u000003", "pai_compat__event_stream_handler"),
        ("0.once.u000004", "pai_compat__model.request_stream"),
    ],
    # the Agents SDK adapter's: `model.<model name>`, `tool.<tool name>`
    "sdk_compat": [
        ("0.once._call.u000001", None),
        ("0.once._call.u000002", None),
        ("0.once.u000001", "model.scripted"),
        (f"0.once.{CALL}", "tool.add"),
        ("0.once.u000002", "model.scripted"),
    ],
    # a graph's steps keep the checkpoint their first attempt found (`graph-start`); its
    # calls are LangGraph's to checkpoint, on the thread (see `LG_CHANNELS`)
    "lg_react": [("0.once.graph-start", None)],
}
APPROVED: dict[str, list[tuple[str, str | None]]] = {
    # the run that asked (step 0), the person's answer kept as its wait unit (u000004);
    # `_call.<unit>` marks a model call in flight (counted as a request if cut off), under
    # the step that sent it
    "pai_compat": [
        ("0.once._call.u000001", None),
        ("2.once._call.u000007", None),
        ("0.once.u000001", "pai_compat__model.request_stream"),
        ("0.once.u000002", "pai_compat__event_stream_handler"),
        ("0.once.u000003", "pai_compat__event_stream_handler"),
        ("0.once.u000004", "approval"),
        (f"0.once.{CALL}", "pai_compat__function_toolset__<agent>.call_tool:remove"),
        ("0.once.u000005", "pai_compat__event_stream_handler"),
        ("0.once.u000006", "pai_compat__event_stream_handler"),
        ("0.once.u000007", "pai_compat__model.request_stream"),
    ],
    "sdk_compat": [
        ("0.once._call.u000001", None),
        ("2.once._call.u000003", None),
        ("0.once.u000001", "model.scripted"),
        ("0.once.u000002", "approval.remove"),
        (f"0.once.{CALL}", "tool.remove"),
        ("0.once.u000003", "model.scripted"),
    ],
    # the step that ran into the interrupt, and the one that resumed it (step 2)
    "lg_react": [("0.once.graph-start", None), ("2.once.graph-start", None)],
}
MCP: dict[str, list[tuple[str, str | None]]] = {
    # Pydantic AI's: the toolset's listing (a unit in sequence, once: it caches tools), its
    # call keyed as a function tool's (named without the tool: Pydantic AI's namer);
    # `_sent.<unit>` marks a call that may not be sent twice (`charge` has neither
    # readOnlyHint nor idempotentHint) as sent
    "pai_compat_mcp": [
        ("0.once._call.u000002", None),
        ("0.once._call.u000005", None),
        (f"0.once._sent.{MCP_CALL}", None),
        ("0.once.u000001", "pai_compat_mcp__mcp_server__shop.get_tools"),
        ("0.once.u000002", "pai_compat_mcp__model.request_stream"),
        (f"0.once.{MCP_CALL}", "pai_compat_mcp__mcp_server__shop.call_tool"),
        ("0.once.u000003", "pai_compat_mcp__event_stream_handler"),
        ("0.once.u000004", "pai_compat_mcp__event_stream_handler"),
        ("0.once.u000005", "pai_compat_mcp__model.request_stream"),
    ],
    # the SDK's: `mcp.<server name>.<tool name>` keyed by its call id; a guardrail's
    # verdict beside the sequence, `b<n>-<digest of its name>`
    "sdk_compat_mcp": [
        ("0.once._call.u000001", None),
        ("0.once._call.u000002", None),
        (f"0.once._sent.{CALL}", None),
        (f"0.once.{GUARDED_IN}", "guardrail.input.screen"),
        (f"0.once.{GUARDED_OUT}", "guardrail.output.check"),
        ("0.once.u000001", "model.scripted"),
        (f"0.once.{CALL}", "mcp.shop.charge"),
        ("0.once.u000002", "model.scripted"),
    ],
}
LG_CHANNELS = ["__start__", "branch:to:agent", "branch:to:tools", "messages"]
"""The channels of a ReAct graph's thread, as LangGraph names them in its checkpoints (the
saver keeps a value per channel and version): a thread checkpointed before an upgrade
that renames them resumes under the new names."""


def _app(mcp: str | None = None) -> App:
    app = App("compat")
    app.add(pai_compat)
    app.add(sdk_compat)
    app.add(as_tool(lg_react))
    if mcp is not None:
        app.add(
            PaiAgent(
                "openai-chat:gpt-4o-mini",
                name="pai_compat_mcp",
                toolsets=[MCPToolset(mcp, id="shop")],
                defer_model_check=True,
            )
        )
        app.add(
            SdkAgent(
                name="sdk_compat_mcp",
                mcp_servers=[MCPServerStreamableHttp(params={"url": mcp}, name="shop")],
                input_guardrails=[screen],
                output_guardrails=[check],
                model="scripted",
            )
        )
    return app


async def _journal(config: NatsConfig, task_id: str) -> list[tuple[str, str | None]]:
    """The task's journal: each key after the task's id, and the name its unit holds
    (None for a memo that is not a unit), in the order of the keys."""
    async with raw_connection(config.url) as raw:
        bucket = await raw.js.key_value(config.names.checkpoints_bucket)
        try:
            stored = await bucket.keys()
        except NoKeysError:
            return []
        found = []
        for key in sorted(k for k in stored if k.startswith(f"{task_id}.") and ".once." in k):
            entry = await bucket.get(key)
            value = json.loads(entry.value or b"null")
            name = value.get("name") if isinstance(value, dict) else None
            found.append((key.removeprefix(f"{task_id}."), name))
    return found


async def _channels(config: NatsConfig, thread_id: str) -> list[str]:
    """The channels the thread holds values of (`<thread>.v.<ns>.<channel>.<version>`)."""
    async with raw_connection(config.url) as raw:
        bucket = bucket_of(config.names.prefix)
        values = f"$KV.{bucket}.{keys.values(thread_id)}"
        info = await raw.js.stream_info(f"KV_{bucket}", subjects_filter=values)
    return sorted({keys.unescape(s.split(".")[-2]) for s in info.state.subjects or {}})


@pytest.fixture
async def compat_worker(make_worker: MakeWorker, model: ScriptedModel) -> None:
    await make_worker(_app())


def _calls(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _ordered(journal: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """By step, then by place (a tool call's key sorts after the next place's)."""
    return sorted(journal, key=lambda unit: unit[0])


@pytest.mark.parametrize("agent", list(JOURNALS))
async def test_a_tool_call_and_an_answer_journal_these_names(
    client: Client, config: NatsConfig, compat_worker: None, model: ScriptedModel, agent: str
) -> None:
    question = model.conversation(_calls("add", a=2, b=3), {"content": "5."})
    handle = await client.submit_agent(agent, question)

    assert await handle.wait(timeout=30) == "5."
    assert await _journal(config, handle.task_id) == _ordered(JOURNALS[agent])
    if agent == "lg_react":
        assert await _channels(config, handle.task_id) == LG_CHANNELS


@pytest.mark.parametrize("agent", list(APPROVED))
async def test_an_approved_call_journals_these_names(
    client: Client, config: NatsConfig, compat_worker: None, model: ScriptedModel, agent: str
) -> None:
    asking = _calls("ask_human", question="Sure?") if agent == "lg_react" else None
    question = model.conversation(asking or _calls("remove", path="/x"), {"content": "Done."})
    handle = await client.submit_agent(agent, question)
    await waiting(handle)
    await client.send_input(handle.task_id, "yes" if asking else {"approved": True})

    assert await handle.wait(timeout=30) == "Done."
    assert await _journal(config, handle.task_id) == _ordered(APPROVED[agent])


@pytest.mark.parametrize("agent", list(MCP))
async def test_an_mcp_call_and_guardrails_journal_these_names(
    client: Client,
    config: NatsConfig,
    make_worker: MakeWorker,
    model: ScriptedModel,
    mcp_server: McpServer,
    agent: str,
) -> None:
    await make_worker(_app(mcp_server.url))
    question = model.conversation(_calls("charge", account="compat", cents=1), {"content": "Done."})
    handle = await client.submit_agent(agent, question)

    assert await handle.wait(timeout=30) == "Done."
    assert await _journal(config, handle.task_id) == _ordered(MCP[agent])


def test_the_names_a_graph_s_step_keeps_its_memos_under() -> None:
    """Memos its runs write only when something fails: not seen in the runs above."""
    assert graph.STARTED_MEMO == "graph-start"
    assert [graph_live.counted_name(n) for n in (1, 2)] == ["graph-counted-a1", "graph-counted-a2"]
