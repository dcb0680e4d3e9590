"""A caller binding copied from another caller's task binds nothing (issue 48, item 8).

The `client` role reads every record's metadata and publishes raw submits. Its task that
carries alice's `metadata.mcp` word for word (copied by the client, or by the API's
`fork` of her task) is not alice's: the seal there is her task's, not this one's. So
its follow-up of her conversation and its answer to her graph's interrupt fail at the
worker before anything of her thread is read or written. Everything runs as its role of
the shipped deploy/nats/roles.conf; the attacker has only the client role's rights."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.apps.agents import app as agents
from tests.apps.langgraph_agents import app as graphs
from tests.e2e.test_gateway import caller
from tests.integration.test_roles import RolesServer, _provision_as_operator, raw, roles_server
from tether import Dispatcher, Worker
from tether.api import ApiService
from tether.gateway import Gateway
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

SECRET = "The vault code is kiwi-4417."
TOKENS = {"alice-token": "alice"}

Api = Callable[..., Awaitable[dict[str, Any]]]


class Stack:
    """alice's gateway, and the API as the `client` role asks it."""

    def __init__(self, gateway: str, api: Api, submit: Callable[..., Awaitable[str]]) -> None:
        self.gateway = gateway
        self.api = api
        self.submit = submit

    async def alices_task(self, tool: str, question: str, status: str) -> str:
        """A task alice started through the gateway, once its status is `status`."""
        async with caller(self.gateway, "alice-token") as alice:
            started = {"name": tool, "arguments": {"input": question}, "task": {}}
            task_id: str = (await alice.call("tools/call", started))["task"]["taskId"]

            async def reached() -> None:
                task = await alice.call("tasks/get", {"taskId": task_id})
                assert task["status"] == status, task

            await eventually(reached, timeout=30)
        return task_id

    async def failed_foreign(self, task_id: str) -> dict[str, Any]:
        ended = await self.api("result", task_id=task_id, timeout_ms=20_000)
        assert ended["status"] == "failed", ended
        assert ended["error"]["type"] == "ForeignConversation", ended
        assert "is not a conversation of this follow-up's caller" in ended["error"]["message"]
        return ended


@pytest.fixture
async def stack(tmp_path: Path, model: ScriptedModel) -> AsyncIterator[Stack]:
    with roles_server(tmp_path) as running:
        await _provision_as_operator(running)
        async with _serving(running) as served:
            yield served
        assert running.violations(users={"gateway", "worker", "dispatcher"}) == []


@asynccontextmanager
async def _serving(running: RolesServer) -> AsyncIterator[Stack]:
    dispatcher, worker = running.config("dispatcher"), running.config("worker")
    async with (
        Dispatcher(dispatcher),
        ApiService(dispatcher),
        Worker(agents, worker),
        Worker(graphs, worker),
        Gateway(running.config("gateway"), port=0, tokens=TOKENS) as gateway,
        raw(running, "client") as client,
    ):

        async def api(verb: str, **body: object) -> dict[str, Any]:
            reply = await client.nc.request(f"tether.api.{verb}", json.dumps(body).encode(), 25)
            answer: dict[str, Any] = json.loads(reply.data)
            assert set(answer) != {"error"}, answer  # an ErrorReply: the API refused
            return answer

        async def submit(task_id: str, steps: list[Any], metadata: dict[str, Any]) -> str:
            """A raw submit on tether.submit.<id>, as any client may publish one."""
            body = {"task_id": task_id, "steps": steps, "metadata": metadata}
            await client.nc.jetstream().publish(
                f"tether.submit.{task_id}", json.dumps(body).encode()
            )
            return task_id

        yield Stack(gateway.url, api, submit)


async def test_a_follow_up_with_a_copied_binding_reads_nothing_of_the_conversation(
    stack: Stack, model: ScriptedModel
) -> None:
    question = model.conversation({"content": SECRET}, {"content": "Still kiwi-4417."})
    alices = await stack.alices_task("researcher", question, "completed")
    record = await stack.api("get", task_id=alices)
    assert record["metadata"]["mcp"]["caller"] == "alice"
    sent = len(model.requests())

    follow_up = {"input": "Repeat the code.", "after": alices}
    copied = await stack.submit(
        "copied-follow-up", [{"tool": "researcher", "input": follow_up}], record["metadata"]
    )
    forked = await stack.api("fork", task_id=alices, from_step=0, input=follow_up)
    for task_id in (copied, forked["task_id"]):
        ended = await stack.failed_foreign(task_id)
        assert "kiwi" not in json.dumps(ended)
    assert len(model.requests()) == sent  # nothing of alice's thread reached the model


async def test_a_resume_with_a_copied_binding_leaves_the_graph_waiting(
    stack: Stack, model: ScriptedModel, executions: Path
) -> None:
    """The client copies alice's binding and her waiting task's last two steps (the ask
    and the resume naming her thread and its interrupt), then answers its own ask."""
    question = model.conversation(
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which city?"}}]},
        {"content": "Oslo it is."},
    )
    alices = await stack.alices_task("lg_react", question, "input_required")
    record = await stack.api("get", task_id=alices)
    asking, resuming = record["steps"][-2:]
    assert resuming["input"]["resume"]["thread"] == alices
    sent = len(model.requests())

    mine = await stack.submit("copied-resume", [asking, resuming], record["metadata"])

    async def waiting() -> None:
        assert (await stack.api("get", task_id=mine))["status"] == "waiting"

    await eventually(waiting, timeout=30)
    await stack.api("input", task_id=mine, data="Bergen")
    ended = await stack.failed_foreign(mine)
    assert "Oslo" not in json.dumps(ended)
    assert len(model.requests()) == sent and "ask_human" not in executions.read_text()
    assert (await stack.api("get", task_id=alices))["status"] == "waiting"
