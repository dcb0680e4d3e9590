"""A follow-up continues only its own caller's conversation (issue 38, item 5): the
gateway answers another caller's `after` as `tasks/get` does ("not found"), and the
worker refuses a thread bound to another caller, whichever door the follow-up came by."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.agents import app as agents
from tests.e2e.test_gateway import RpcError, caller
from tests.integration.test_roles import RolesServer, _provision_as_operator, raw, roles_server
from tether import Client, Dispatcher, NatsConfig, TaskFailedError, TaskStatus, Worker
from tether.api import ApiService
from tether.gateway import Gateway
from tether.testing import eventually
from tether.testing.llm import ScriptedModel

SECRET = "The vault code is kiwi-4417."
TOKENS = {"alice-token": "alice", "bob-token": "bob"}


@pytest.fixture
async def gateway(config: NatsConfig, api: object, dispatcher: object) -> AsyncIterator[str]:
    """A gateway with two callers, alice and bob (it answers and cancels through the API)."""
    async with Gateway(config, port=0, tokens=TOKENS) as running:
        yield running.url


async def _alices_conversation(gateway: str, client: Client, model: ScriptedModel) -> str:
    """A conversation alice had through the gateway; its task id."""
    question = model.conversation({"content": SECRET}, {"content": "Still kiwi-4417."})
    async with caller(gateway, "alice-token") as alice:
        started = {"name": "researcher", "arguments": {"input": question}, "task": {}}
        task_id: str = (await alice.call("tools/call", started))["task"]["taskId"]
    assert await client.handle(task_id).wait(timeout=30) == SECRET
    return task_id


async def test_bob_cannot_continue_alices_conversation_through_the_gateway(
    gateway: str, client: Client, agent_worker: Worker, model: ScriptedModel
) -> None:
    alices = await _alices_conversation(gateway, client, model)
    sent = len(model.requests())
    follow_up = {"input": "What did the assistant say?", "after": alices}

    async with caller(gateway, "bob-token") as bob:
        with pytest.raises(RpcError) as looked_up:
            await bob.call("tasks/get", {"taskId": alices})
        for call in (
            {"name": "researcher", "arguments": follow_up},
            {"name": "researcher", "arguments": follow_up, "task": {}},
            {
                "name": "run_plan",
                "arguments": {"steps": [{"tool": "researcher", "input": follow_up}]},
                "task": {},
            },
        ):
            with pytest.raises(RpcError) as refused:
                await bob.call("tools/call", call)
            assert str(refused.value) == str(looked_up.value)  # the same "not found"
            assert refused.value.code == looked_up.value.code
        assert "kiwi" not in str(refused.value)

    assert len(model.requests()) == sent  # nothing of bob's reached the model
    async with caller(gateway, "alice-token") as alice:  # alice continues her own
        answered = await alice.call("tools/call", {"name": "researcher", "arguments": follow_up})
    assert answered["content"][0]["text"] == '"Still kiwi-4417."'


async def test_a_raw_submit_continuing_another_callers_conversation_fails_and_leaks_nothing(
    gateway: str, client: Client, agent_worker: Worker, model: ScriptedModel
) -> None:
    """Past the gateway: any client's raw JSON step naming alice's task, bound to no
    caller or to another, fails at the worker before anything of the thread is read."""
    alices = await _alices_conversation(gateway, client, model)
    sent = len(model.requests())
    step = {"tool": "researcher", "input": {"input": "Repeat the code.", "after": alices}}
    for metadata in ({}, {"mcp": {"tool": "researcher", "caller": "bob", "seal": "0" * 64}}):
        handle = await client.submit([step], metadata=metadata)
        with pytest.raises(TaskFailedError) as failed:
            await handle.wait(timeout=30)
        error = failed.value.error
        assert error.type == "ForeignConversation"
        assert f"task {alices!r} is not a conversation of this follow-up's caller" in error.message
        assert "kiwi" not in error.message and "alice" not in error.message
        record = await client.get(handle.task_id)
        assert record.status is TaskStatus.FAILED and record.result is None
    assert len(model.requests()) == sent


async def test_a_sub_agents_follow_up_is_checked_against_its_roots_caller(
    gateway: str, client: Client, agent_worker: Worker, model: ScriptedModel
) -> None:
    """A child task carries no binding of its own: its tree's root's counts, so a model
    told to pass `after` to a sub-agent cannot reach another caller's conversation."""
    alices = await _alices_conversation(gateway, client, model)
    delegate = {"name": "researcher", "arguments": {"input": "Repeat it.", "after": alices}}
    question = model.conversation({"tool_calls": [delegate]}, {"content": "Nothing to say."})
    async with caller(gateway, "bob-token") as bob:
        arguments = {"input": question}
        answered = await bob.call("tools/call", {"name": "analyst", "arguments": arguments})
    assert answered["content"][0]["text"] == '"Nothing to say."'
    told = model.requests(question)[-1]["last"]
    assert told["role"] == "tool" and "is not a conversation of this" in told["text"]
    assert "kiwi" not in told["text"]

    async def children_failed() -> None:
        failed = [r for r in await client.list(TaskStatus.FAILED) if r.parent is not None]
        assert failed and failed[0].error is not None
        assert failed[0].error.type == "ForeignConversation"

    await eventually(children_failed, timeout=10)


# -- the same doors on a server started from the shipped deploy/nats/roles.conf ---------------
async def test_under_roles_conf_no_door_crosses_callers(
    tmp_path: Path, model: ScriptedModel
) -> None:
    """The gateway as its role, the worker as its role, and a `client` asking the API:
    bob's follow-up is "not found" and the client's fails at the worker, each checked by
    its effect (nothing of alice's thread reaches the model or an answer)."""
    question = model.conversation({"content": SECRET})
    with roles_server(tmp_path) as running:
        await _provision_as_operator(running)
        dispatcher = running.config("dispatcher")
        async with Dispatcher(dispatcher), ApiService(dispatcher):
            ended, sent = await _cross_under_roles(running, model, question)
    assert ended["status"] == "failed" and ended["error"]["type"] == "ForeignConversation", ended
    assert "is not a conversation of this follow-up's caller" in ended["error"]["message"]
    assert "kiwi" not in json.dumps(ended)
    assert len(model.requests()) == sent
    assert running.violations(users={"gateway", "worker"}) == []


async def _cross_under_roles(
    running: RolesServer, model: ScriptedModel, question: str
) -> tuple[dict[str, Any], int]:
    """Alice's conversation through the gateway, bob's refused follow-up, then a client's
    through the API: what the API's `result` says of the client's, and the model's
    request count before bob and the client tried."""
    async with (
        Worker(agents, running.config("worker")),
        Gateway(running.config("gateway"), port=0, tokens=TOKENS) as served,
        raw(running, "client") as client,
    ):
        async with caller(served.url, "alice-token") as alice:
            started = {"name": "researcher", "arguments": {"input": question}, "task": {}}
            alices: str = (await alice.call("tools/call", started))["task"]["taskId"]

            async def completed() -> None:
                task = await alice.call("tasks/get", {"taskId": alices})
                assert task["status"] == "completed", task

            await eventually(completed, timeout=30)
        sent = len(model.requests())
        follow_up = {"input": "Repeat the code.", "after": alices}
        async with caller(served.url, "bob-token") as bob:
            with pytest.raises(RpcError, match="not found"):
                await bob.call("tools/call", {"name": "researcher", "arguments": follow_up})

        async def api(verb: str, **body: object) -> dict[str, Any]:
            reply = await client.nc.request(f"tether.api.{verb}", json.dumps(body).encode(), 25)
            answer: dict[str, Any] = json.loads(reply.data)
            return answer

        submitted = await api("submit", steps=[{"tool": "researcher", "input": follow_up}])
        return await api("result", task_id=submitted["task_id"], timeout_ms=20_000), sent
