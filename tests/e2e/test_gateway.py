"""`tether gateway` as real processes: MCP clients of both task generations drive Tether tasks.

One nats-server, two gateway processes and a worker process serve the whole module
(each test's tasks have their own ids); the dispatcher runs in-process. The `mcp`
client covers listing, plain calls, 2026-07-28 task handles and the `tasks/*` requests;
raw JSON-RPC over httpx covers what it cannot send: a 2025-11-25 task-augmented call
and a `subscriptions/listen` naming task ids. The 2026-07-28 task calls go through the
public helper, `tether.mcp_tasks`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp import Client as McpClient
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from nats.js.errors import NoKeysError
from pydantic import TypeAdapter

from tests.apps.mcp_agents import make_app
from tests.apps.tools import read_executions
from tests.conftest import APP, ROOT, raw_connection, start_worker, stop_worker
from tether import Client, NatsConfig, Worker
from tether.mcp_tasks import (
    MODERN_PROTOCOL,
    TASKS_EXTENSION,
    TERMINAL_STATUSES,
    CreatedTask,
    TaskIdParams,
    TaskRequest,
    TasksExtension,
    cancel_task,
    get_task,
    start_task,
    tasks_client,
    update_task,
    wait_for_task,
)
from tether.schemas.names import Names
from tether.testing import eventually, wait_until
from tether.testing.llm import ScriptedModel

AGENTS = "tests.apps.agents:app"
LEGACY = "2025-11-25"
MODERN = MODERN_PROTOCOL
INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_CAPABILITY = -32602, -32601, -32021
TERMINAL = TERMINAL_STATUSES
ANY: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


# -- the stack: two gateways, a worker, one prefix for the module -----------------------------
@pytest.fixture(scope="module")
def prefix() -> str:
    """One installation for the module: the gateways and the worker outlive single tests."""
    return f"gw{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def stack(nats_url: str, prefix: str) -> NatsConfig:
    return NatsConfig(url=nats_url, names=Names(prefix=prefix))


@pytest.fixture(autouse=True)
def _dispatching(dispatcher: object, api: object) -> None:
    """Every test submits tasks: the in-process dispatcher records them, and the API
    answers and cancels them for the gateway (whose user may not write tasks)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Workers:
    config: NatsConfig
    logs: Path
    executions: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> subprocess.Popen[bytes]:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TETHER_TEST_EXECUTIONS", str(self.executions))
            log = self.logs / f"worker-{len(self.processes)}.log"
            process = start_worker(self.config, APP, AGENTS, log=log)
        self.processes.append(process)
        return process

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)


@pytest.fixture(scope="module")
def workers(
    stack: NatsConfig, model: ScriptedModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    """One worker process serving the test tools and the test agent (on the scripted model)."""
    logs = tmp_path_factory.mktemp("workers")
    pool = Workers(stack, logs, logs / "executions.log")
    pool.executions.touch()
    pool.start()
    yield pool
    for process in pool.processes:
        if process.poll() is None:
            stop_worker(process)


@pytest.fixture(scope="module")
async def gateways(
    stack: NatsConfig, workers: Workers, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, str]]:
    """Two `tether gateway` processes on the same installation."""
    logs = tmp_path_factory.mktemp("gateways")
    started = [_start_gateway(stack, logs / f"gateway-{n}.log") for n in range(2)]
    try:
        for process, log, _ in started:
            await wait_until(
                lambda p=process, out=log: (
                    "MCP gateway serving" in out.read_text() or p.poll() is not None
                ),
                timeout=30,
                message="the gateway to start",
            )
            assert process.poll() is None, log.read_text()
        await wait_until(lambda: _tools_registered(stack), timeout=30, message="the worker")
        yield started[0][2], started[1][2]
    finally:
        for process, _, _ in started:
            process.send_signal(signal.SIGTERM)
        for process, log, _ in started:
            assert process.wait(15) == 0, log.read_text()


def _start_gateway(
    config: NatsConfig, log: Path, *options: str
) -> tuple[subprocess.Popen[bytes], Path, str]:
    """`tether gateway` as a real process; returns it, its log and its MCP URL."""
    port = _free_port()
    command = [sys.executable, "-m", "tether.cli", "gateway", "--port", str(port), *options]
    command += ["--nats", config.url, "--prefix", config.names.prefix]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=out, stderr=out
        )
    return process, log, f"http://127.0.0.1:{port}/mcp"


async def _tools_registered(config: NatsConfig) -> bool:
    async with Client(config) as client:
        return await client._store.tools.get("asks") is not None


# -- clients -------------------------------------------------------------------------------
async def tasks_call(session: Any, method: str, task_id: str) -> dict[str, Any]:
    """Any `tasks/*` request naming one task, in either generation (2025's `tasks/result` too)."""
    request = TaskRequest(method=method, params=TaskIdParams(task_id=task_id))
    result: dict[str, Any] = await session.send_request(request, ANY, 30)
    return result


def legacy(url: str, **options: Any) -> McpClient:
    return McpClient(url, mode="legacy", **options)


def modern(url: str, *, tasks: bool = True) -> McpClient:
    if not tasks:
        return McpClient(url, mode=MODERN)
    return tasks_client(url, tasks=TasksExtension(timeout=30, poll_interval=0.05))


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["message"])
        self.code: int = error["code"]


class RawSession:
    """A 2025-11-25 session over raw JSON-RPC: the `mcp` client cannot send `params.task`."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url, self.http = url, http
        self.headers = {"accept": "application/json, text/event-stream"}
        self._id = 0

    async def open(self) -> RawSession:
        client = {"name": "raw", "version": "0"}
        init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": client}
        response = await self._post(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
        )
        assert "result" in _messages(response)[0], response.text
        self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = LEGACY
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def close(self) -> None:
        await self.http.delete(self.url, headers=self.headers)

    async def _post(self, body: dict[str, Any]) -> httpx.Response:
        response = await self.http.post(self.url, json=body, headers=self.headers, timeout=30)
        assert response.status_code < 300, response.text
        return response

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._id += 1
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        response = await self._post(body)
        for message in _messages(response):
            if message.get("id") == self._id:
                if "error" in message:
                    raise RpcError(message["error"])
                result: dict[str, Any] = message["result"]
                return result
        raise AssertionError(f"no answer to {method}: {response.text}")


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    if response.headers.get("content-type", "").startswith("application/json"):
        return [response.json()]
    lines = response.text.splitlines()
    return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:].strip()]


@contextlib.asynccontextmanager
async def raw_session(url: str) -> AsyncIterator[RawSession]:
    async with httpx.AsyncClient() as http:
        session = await RawSession(url, http).open()
        try:
            yield session
        finally:
            await session.close()


async def start_legacy_task(url: str, tool: str, arguments: Any, ttl: int = 60_000) -> str:
    """A 2025-11-25 task-augmented call; the session ends as soon as the handle is back."""
    async with raw_session(url) as raw:
        created = await raw.call(
            "tools/call", {"name": tool, "arguments": arguments, "task": {"ttl": ttl}}
        )
    task = created["task"]
    assert task["status"] == "working" and task["ttl"] == ttl and task["pollInterval"] > 0
    assert task["createdAt"].endswith("Z") and task["lastUpdatedAt"].endswith("Z")
    task_id: str = task["taskId"]
    return task_id


async def start_modern_task(url: str, tool: str, arguments: Any) -> str:
    """A 2026-07-28 call from a client that declared the tasks extension: a handle at once."""
    async with modern(url) as client:
        created = await start_task(client, tool, arguments)
    assert isinstance(created, CreatedTask), created
    # The handle shows the task as it is now: a fast task may be past `working` already.
    assert created.status in {"working", "input_required", *TERMINAL} and created.poll_interval_ms
    return created.task_id


async def poll(url: str, generation: str, task_id: str, status: Collection[str]) -> dict[str, Any]:
    """`tasks/get` from a new session until the task's status is in `status`."""
    if generation == MODERN:
        async with modern(url) as client:
            return await wait_for_task(client, task_id, until=status, timeout=30, poll_interval=0.1)
    async with legacy(url) as client:

        async def check() -> dict[str, Any]:
            task = await tasks_call(client.session, "tasks/get", task_id)
            assert task["status"] in status, task
            return task

        return await eventually(check, timeout=30, interval=0.1)


async def start_any_task(url: str, generation: str, tool: str, arguments: Any) -> str:
    if generation == LEGACY:
        return await start_legacy_task(url, tool, arguments)
    return await start_modern_task(url, tool, arguments)


GENERATIONS = pytest.mark.parametrize("generation", [LEGACY, MODERN])


# -- tests ---------------------------------------------------------------------------------
@GENERATIONS
async def test_lists_the_workers_tools_with_schemas_and_run_plan(
    gateways: tuple[str, str], generation: str
) -> None:
    client = legacy(gateways[0]) if generation == LEGACY else modern(gateways[0])
    async with client:
        assert client.protocol_version == generation
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        plain = await client.call_tool("search", {"query": "AI trends 2026", "limit": 2})

    assert {"run_plan", "search", "summarize", "asks", "slow"} <= set(tools)
    search = tools["search"]
    assert search.description == "Search a tiny corpus."
    assert search.input_schema["type"] == "object"
    assert search.input_schema["properties"]["query"] == {"type": "string"}
    assert search.input_schema["required"] == ["query"]
    # A tool that takes a list is wrapped: MCP tool arguments are always an object.
    assert tools["summarize"].input_schema["properties"]["input"]["type"] == "array"
    assert tools["slow"].input_schema == {"type": "object", "properties": {}}
    assert tools["run_plan"].input_schema["required"] == ["steps"]
    if generation == LEGACY:
        assert tools["search"].execution and tools["search"].execution.task_support == "optional"
        assert (
            tools["run_plan"].execution and tools["run_plan"].execution.task_support == "required"
        )
    else:
        assert tools["search"].execution is None
    # A plain call_tool answers the result: the 2025 gateway waits for the task, the 2026
    # client gets a task handle that its ResultClaim resolves by polling tasks/get.
    assert plain.structured_content == {
        "result": ["agents run for hours", "durable execution matters"]
    }
    assert json.loads(plain.content[0].text) == [
        "agents run for hours",
        "durable execution matters",
    ]  # type: ignore[union-attr]


async def test_an_agent_is_a_tool_and_its_answer_streams_as_progress(
    gateways: tuple[str, str], model: ScriptedModel
) -> None:
    question = f"mcp agent {uuid.uuid4().hex[:8]}"
    answer = "An agent over MCP streams its answer as progress notifications."
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "MCP progress"}}]}
    turns = [search, {"content": answer}]
    # A word per 30 ms: each goes out as a chunk of its own (text is batched per 25 ms).
    model.load({"chunk_delay": 0.03, "conversations": [{"match": question, "turns": turns}]})
    pieces: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        pieces.append(message or "")

    async with legacy(gateways[0]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool(
            "researcher", {"input": question}, progress_callback=progress
        )

    assert tools["researcher"].input_schema["required"] == ["input"]
    assert result.structured_content == {"result": answer}
    assert "".join(pieces) == answer and len(pieces) > 3  # word by word, in order


async def test_a_typed_agent_lists_its_output_schema_and_answers_with_structured_content(
    gateways: tuple[str, str], model: ScriptedModel
) -> None:
    question = f"mcp report {uuid.uuid4().hex[:8]}"
    report = {"title": "MCP", "score": 7, "sources": ["spec"]}
    model.load({"conversations": [{"match": question, "turns": [{"content": json.dumps(report)}]}]})

    async with legacy(gateways[0]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("reporter", {"input": question})

    schema = tools["reporter"].output_schema
    assert schema is not None and schema["type"] == "object"
    assert schema["required"] == ["title", "score", "sources"]
    assert tools["researcher"].output_schema is None  # a text answer promises no shape
    assert result.structured_content == report  # the object itself, as outputSchema says


@GENERATIONS
async def test_handle_at_once_then_a_new_session_polls_to_the_result(
    gateways: tuple[str, str], generation: str
) -> None:
    task_id = await start_any_task(gateways[0], generation, "slow", {"sleep": 0.5})

    task = await poll(gateways[0], generation, task_id, {"completed"})

    expected = {"step": 0, "slept": 0.5}
    if generation == MODERN:
        assert task["result"]["structuredContent"] == expected
        assert task["resultType"] == "complete" and task["ttlMs"] is None
        return
    async with legacy(gateways[0]) as client:
        result = await tasks_call(client.session, "tasks/result", task_id)
    assert result["structuredContent"] == expected and result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == expected
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}


@GENERATIONS
async def test_two_gateway_processes_answer_for_the_same_task(
    gateways: tuple[str, str], generation: str
) -> None:
    first, second = gateways
    task_id = await start_any_task(first, generation, "run_plan", {"steps": [
        {"tool": "search", "input": {"query": "AI trends 2026"}},
        {"tool": "summarize"},
    ]})  # fmt: skip

    done = await poll(second, generation, task_id, {"completed"})
    again = await poll(first, generation, task_id, {"completed"})

    assert done["taskId"] == again["taskId"] == task_id
    assert done["lastUpdatedAt"] == again["lastUpdatedAt"]
    summary = "agents run for hours; durable execution matters; MCP tasks"
    if generation == MODERN:
        assert done["result"]["structuredContent"] == {"result": summary}
        return
    async with raw_session(second) as raw:
        listed = await raw.call("tasks/list", {})
        result = await raw.call("tasks/result", {"taskId": task_id})
    assert task_id in {task["taskId"] for task in listed["tasks"]}
    assert result["structuredContent"] == {"result": summary}


@pytest.mark.slow
async def test_a_worker_killed_mid_task_and_both_clients_still_get_the_result(
    gateways: tuple[str, str], workers: Workers
) -> None:
    first, second = gateways
    old = await start_legacy_task(first, "slow", {"sleep": 1.5})
    new = await start_modern_task(second, "slow", {"sleep": 1.5})
    running = {(old, 0), (new, 0)}
    await wait_until(lambda: running <= set(read_executions(workers.executions)), timeout=20)

    workers.kill()  # SIGKILL with both steps in flight
    workers.start()

    async with legacy(second) as client:  # tasks/result blocks until the task has ended
        result = await tasks_call(client.session, "tasks/result", old)
    assert result["structuredContent"] == {"step": 0, "slept": 1.5}
    task = await poll(first, MODERN, new, TERMINAL)
    assert task["status"] == "completed", task
    assert task["result"]["structuredContent"] == {"step": 0, "slept": 1.5}
    runs = read_executions(workers.executions)
    assert runs[(old, 0)] == runs[(new, 0)] == 2  # the step that was running ran again


@GENERATIONS
async def test_cancel(gateways: tuple[str, str], generation: str) -> None:
    task_id = await start_any_task(gateways[0], generation, "slow", {"sleep": 30})
    client = legacy(gateways[1]) if generation == LEGACY else modern(gateways[1])
    async with client:
        answer = await tasks_call(client.session, "tasks/cancel", task_id)
        task = await tasks_call(client.session, "tasks/get", task_id)
        if generation == LEGACY:
            assert answer["status"] == "cancelled" and answer["taskId"] == task_id
            with pytest.raises(MCPError) as again:
                await tasks_call(client.session, "tasks/cancel", task_id)
            assert again.value.code == INVALID_PARAMS and "terminal" in again.value.message
            with pytest.raises(MCPError) as no_result:
                await tasks_call(client.session, "tasks/result", task_id)
            assert no_result.value.code == INVALID_PARAMS
        else:
            assert answer["resultType"] == "complete" and "status" not in answer
            assert await tasks_call(client.session, "tasks/cancel", task_id) == answer
    assert task["status"] == "cancelled"


async def test_input_required_2025_answered_by_elicitation_resumes_without_rerun(
    gateways: tuple[str, str], workers: Workers
) -> None:
    steps = [{"tool": "asks"}, {"tool": "fast"}]
    task_id = await start_legacy_task(gateways[0], "run_plan", {"steps": steps})
    waiting = await poll(gateways[1], LEGACY, task_id, {"input_required"})
    assert waiting["statusMessage"] == "Approve the draft?"
    asked: list[types.ElicitRequestParams] = []

    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approved": True})

    async with legacy(gateways[1], elicitation_callback=answer) as client:
        result = await tasks_call(client.session, "tasks/result", task_id)

    assert result["structuredContent"] == {"step": 1, "payload": {"approved": True}}
    assert len(asked) == 1 and asked[0].message == "Approve the draft?"
    assert asked[0].meta and asked[0].meta["io.modelcontextprotocol/related-task"] == {
        "taskId": task_id
    }  # type: ignore[typeddict-item]
    assert read_executions(workers.executions)[(task_id, 0)] == 1  # the step that asked: once


async def test_input_required_2026_answered_by_tasks_update_resumes_without_rerun(
    gateways: tuple[str, str], workers: Workers
) -> None:
    steps = [{"tool": "asks"}, {"tool": "fast"}]
    task_id = await start_modern_task(gateways[0], "run_plan", {"steps": steps})
    waiting = await poll(gateways[1], MODERN, task_id, {"input_required"})
    [(key, request)] = waiting["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Approve the draft?"
    assert request["params"]["requestedSchema"]["type"] == "object"

    async with modern(gateways[0]) as client:
        with pytest.raises(MCPError) as refused:
            await update_task(client, task_id, {
                key: {"action": "accept", "content": {"approved": "yes"}},
            })  # fmt: skip
        assert refused.value.code == INVALID_PARAMS
        assert "'yes' is not of type 'boolean'" in refused.value.message
        ack = await update_task(client, task_id, {
            "not-a-key": {"action": "accept", "content": {"approved": False}},
            key: {"action": "accept", "content": {"approved": True}},
        })  # fmt: skip
    assert ack["resultType"] == "complete"

    done = await poll(gateways[1], MODERN, task_id, {"completed"})
    assert done["result"]["structuredContent"] == {"step": 1, "payload": {"approved": True}}
    assert read_executions(workers.executions)[(task_id, 0)] == 1


@GENERATIONS
async def test_a_failing_tool_fails_the_task_with_its_error(
    gateways: tuple[str, str], generation: str
) -> None:
    task_id = await start_any_task(gateways[0], generation, "refuses", {})
    task = await poll(gateways[1], generation, task_id, TERMINAL)

    assert "permission denied" in task["statusMessage"]
    if generation == MODERN:
        # SEP-2663: a tool that failed is a completed call with an error result;
        # `failed` is for JSON-RPC errors of the request itself.
        assert task["status"] == "completed" and "error" not in task
        assert task["result"]["isError"] is True
        assert "permission denied" in task["result"]["content"][0]["text"]
        return
    assert task["status"] == "failed"
    async with legacy(gateways[1]) as client:
        result = await tasks_call(client.session, "tasks/result", task_id)
    assert result["isError"] is True and "permission denied" in result["content"][0]["text"]


async def test_the_errors_the_specs_name(gateways: tuple[str, str]) -> None:
    url = gateways[0]
    async with legacy(url) as client:
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(MCPError) as unknown:
                await tasks_call(client.session, method, "no-such-task")
            assert unknown.value.code == INVALID_PARAMS, method
        with pytest.raises(MCPError) as required:  # taskSupport "required", called without a task
            await client.call_tool("run_plan", {"steps": [{"tool": "fast"}]})
        assert required.value.code == METHOD_NOT_FOUND
        with pytest.raises(MCPError) as unknown_tool:
            await client.call_tool("no_such_tool", {})
        assert unknown_tool.value.code == INVALID_PARAMS
        with pytest.raises(MCPError) as bad_arguments:  # checked against inputSchema: no task
            await client.call_tool("search", {"query": 5})
        assert bad_arguments.value.code == INVALID_PARAMS
        assert "$.query: 5 is not of type 'string'" in bad_arguments.value.message
    async with raw_session(url) as raw:
        with pytest.raises(RpcError) as malformed:
            await raw.call("tasks/get", {"task": "x"})
        assert malformed.value.code == INVALID_PARAMS
        with pytest.raises(RpcError) as bad_plan:
            await raw.call("tools/call", {"name": "run_plan", "arguments": {}, "task": {}})
        assert bad_plan.value.code == INVALID_PARAMS
    async with modern(url) as client:
        with pytest.raises(MCPError) as unknown:
            await get_task(client, "no-such-task")
        assert unknown.value.code == INVALID_PARAMS
        with pytest.raises(MCPError) as gone:  # tasks/result is not part of 2026-07-28
            await tasks_call(client.session, "tasks/result", "no-such-task")
        assert gone.value.code == METHOD_NOT_FOUND
    async with modern(url, tasks=False) as client:
        with pytest.raises(MCPError) as undeclared:
            await get_task(client, "no-such-task")
        assert undeclared.value.code == MISSING_CAPABILITY
        assert undeclared.value.data == {
            "requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
        }
        with pytest.raises(MCPError) as needs_task:
            await client.call_tool("run_plan", {"steps": [{"tool": "fast"}]})
        assert needs_task.value.code == MISSING_CAPABILITY


async def test_a_2026_client_without_the_extension_is_asked_and_answers_by_retrying(
    gateways: tuple[str, str],
) -> None:
    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approved": True})

    async with McpClient(gateways[0], mode=MODERN, elicitation_callback=answer) as client:
        result = await client.call_tool("asks", {})
    assert result.structured_content == {"approved": True}


async def test_the_public_helper_starts_waits_and_resolves_plain_calls(
    gateways: tuple[str, str],
) -> None:
    async with tasks_client(gateways[0]) as client:  # the defaults a user gets
        created = await start_task(client, "slow", {"sleep": 0.3})
        task = await wait_for_task(client, created.task_id, timeout=30)
        plain = await client.call_tool("fast", {"n": 1})  # a handle, resolved by the claim

    assert task["status"] == "completed" and task["taskId"] == created.task_id
    assert task["result"]["structuredContent"] == {"step": 0, "slept": 0.3}
    assert plain.structured_content == {"step": 0, "payload": {"n": 1}}


async def test_the_public_helper_answers_questions_times_out_and_cancels(
    gateways: tuple[str, str],
) -> None:
    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approved": True})

    async with tasks_client(gateways[0], elicitation_callback=answer) as client:
        # The task asks mid-way: the claim answers through the callback and tasks/update.
        asked = await client.call_tool("asks", {})
        created = await start_task(client, "slow", {"sleep": 30})
        with pytest.raises(TimeoutError, match=created.task_id):
            await wait_for_task(client, created.task_id, timeout=0.3, poll_interval=0.05)
        await cancel_task(client, created.task_id)
        cancelled = await wait_for_task(client, created.task_id, timeout=30)

    assert asked.structured_content == {"approved": True}
    assert cancelled["status"] == "cancelled"


def modern_request(method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A raw 2026-07-28 request (per-request envelope) and its routing headers."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": meta, **params}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN}
    return body, {**headers, "mcp-method": method}


async def test_status_pushed_to_a_2026_listen_stream(gateways: tuple[str, str]) -> None:
    task_id = await start_modern_task(gateways[0], "slow", {"sleep": 0.5})
    listen = {"notifications": {"taskIds": [task_id, "unknown"]}}
    body, headers = modern_request("subscriptions/listen", listen)
    seen: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", gateways[1], json=body, headers=headers) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1].get("params", {}).get("status") == "completed":
                    break
    ack, *updates = seen
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    assert {update["method"] for update in updates} == {"notifications/tasks"}
    assert updates[-1]["params"]["result"]["structuredContent"] == {"step": 0, "slept": 0.5}
    assert updates[-1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7


async def test_status_pushed_to_a_connected_2025_session(gateways: tuple[str, str]) -> None:
    pushed: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=30) as http:
        raw = await RawSession(gateways[0], http).open()
        try:
            async with http.stream("GET", raw.url, headers=raw.headers) as stream:
                arguments = {"name": "slow", "arguments": {"sleep": 0.3}, "task": {}}
                task_id = (await raw.call("tools/call", arguments))["task"]["taskId"]
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        pushed.append(json.loads(line[5:]))
                        if pushed[-1]["params"]["status"] in TERMINAL:
                            break
        finally:
            await raw.close()
    assert pushed[-1]["method"] == "notifications/tasks/status"
    assert pushed[-1]["params"]["taskId"] == task_id
    assert pushed[-1]["params"]["status"] == "completed"


async def test_the_mcp_name_header_must_name_the_task(gateways: tuple[str, str]) -> None:
    task_id = await start_modern_task(gateways[0], "fast", {})
    body, headers = modern_request("tasks/get", {"taskId": task_id})
    async with httpx.AsyncClient(timeout=30) as http:
        right = await http.post(gateways[1], json=body, headers={**headers, "mcp-name": task_id})
        wrong = await http.post(gateways[1], json=body, headers={**headers, "mcp-name": "other"})
    assert right.status_code == 200 and _messages(right)[0]["result"]["taskId"] == task_id
    assert _messages(wrong)[0]["error"]["code"] == -32020  # header mismatch


@pytest.fixture(scope="module")
async def guarded(
    stack: NatsConfig, workers: Workers, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A gateway that takes two callers' tokens."""
    log = tmp_path_factory.mktemp("guarded") / "gateway.log"
    process, log, url = _start_gateway(
        stack, log, "--token", "alice=alice-token", "--token", "bob=bob-token"
    )
    try:
        await wait_until(
            lambda: "MCP gateway serving" in log.read_text() or process.poll() is not None,
            timeout=30,
            message="the gateway to start",
        )
        assert process.poll() is None, log.read_text()
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0, log.read_text()


@contextlib.asynccontextmanager
async def caller(url: str, token: str) -> AsyncIterator[RawSession]:
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http:
        session = await RawSession(url, http).open()
        try:
            yield session
        finally:
            await session.close()


async def test_a_gateway_with_tokens_refuses_a_call_without_one(guarded: str) -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        anonymous = await http.post(guarded, json=init)
        forged = await http.post(guarded, json=init, headers={"authorization": "Bearer nope"})
    assert anonymous.status_code == 401 and forged.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")


async def test_a_task_planted_with_a_callers_name_is_in_no_callers_list(
    guarded: str, stack: NatsConfig
) -> None:
    """Hole 6 of issue 24: any NATS client may publish a task whose metadata names an MCP
    caller; the gateway lists and shows only tasks it sealed to that caller itself."""
    planted = f"planted-{uuid.uuid4().hex[:8]}"
    forged = {"mcp": {"tool": "fast", "caller": "alice", "seal": "0" * 64}}
    async with Client(stack) as client:
        await client.submit([{"tool": "fast", "input": {}}], task_id=planted, metadata=forged)
        await client.handle(planted).wait(timeout=20)
    async with caller(guarded, "alice-token") as alice:
        listed = await alice.call("tasks/list", {})
        assert planted not in [task["taskId"] for task in listed["tasks"]]
        with pytest.raises(RpcError, match="not found"):
            await alice.call("tasks/get", {"taskId": planted})


async def test_a_callers_tasks_are_hidden_from_another_caller(guarded: str) -> None:
    async with caller(guarded, "alice-token") as alice, caller(guarded, "bob-token") as bob:
        arguments = {"name": "slow", "arguments": {"sleep": 5}, "task": {}}
        task_id = (await alice.call("tools/call", arguments))["task"]["taskId"]

        assert (await alice.call("tasks/get", {"taskId": task_id}))["taskId"] == task_id
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(RpcError, match="not found"):
                await bob.call(method, {"taskId": task_id})
        listed = await bob.call("tasks/list", {})
        assert task_id not in [task["taskId"] for task in listed["tasks"]]
        with pytest.raises(RpcError, match="invalid cursor"):  # nor learns it exists
            await bob.call("tasks/list", {"cursor": task_id})
        mine = await alice.call("tasks/list", {})
        assert task_id in [task["taskId"] for task in mine["tasks"]]
        assert "nextCursor" not in mine
        assert (await alice.call("tasks/get", {"taskId": task_id}))["status"] == "working"
        await alice.call("tasks/cancel", {"taskId": task_id})  # its owner may


async def _polled(stack: NatsConfig, task_id: str) -> bool:
    """Whether a step of `task_id` stored the id of the MCP task it polls."""
    async with raw_connection(stack.url) as raw:
        bucket = await raw.js.key_value(stack.names.checkpoints_bucket)
        with contextlib.suppress(NoKeysError):
            keys = await bucket.keys()
            return any(k.startswith(f"{task_id}.") and k.endswith(".once.mcp-task") for k in keys)
        return False


async def test_an_agent_calls_a_gateway_tool_as_a_task_and_a_crash_does_not_call_it_twice(
    gateways: tuple[str, str],
    stack: NatsConfig,
    workers: Workers,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    """Tether's gateway is an MCP server that runs calls as tasks: an agent offered its tools
    polls the task it started, so a SIGKILL of the agent's worker mid-poll starts no second."""
    url = gateways[0]
    call = {"tool_calls": [{"name": "slow", "arguments": {"sleep": 2}}]}
    question = model.conversation(call, {"content": "Done."})

    def tasks_run() -> set[str]:
        return {task for task, _ in read_executions(workers.executions)}

    before = tasks_run()
    async with Client(stack) as client:
        handle = await client.submit_agent("clerk", question)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TETHER_TEST_MCP_SERVERS", url)
            doomed = start_worker(stack, "tests.apps.mcp_agents:app", log=tmp_path / "doomed.log")
        try:
            await wait_until(
                lambda: len(tasks_run() - before) == 1,
                timeout=30,
                message="the gateway's task to start",
            )
            # mid-poll: the gateway's task id is stored (killed before that, the call's
            # outcome is unknown, and it is not made again: `tether.agents.mcp_tools`)
            await wait_until(
                lambda: _polled(stack, handle.task_id), timeout=30, message="its id stored"
            )
        finally:
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
        async with Worker(make_app([url]), stack):
            assert await handle.wait(timeout=30) == "Done."

    started = tasks_run() - before
    assert len(started) == 1 and read_executions(workers.executions)[(started.pop(), 0)] == 1
    last = model.requests(question)[-1]["last"]
    assert last == {"role": "tool", "text": '{"step": 0, "slept": 2}'}
