"""An OpenAI Agents SDK agent's worker killed (SIGKILL) in the middle of a tool call and
while its task waits for an approval: a new worker finishes the run, no finished model
call is sent again and no finished tool call runs again."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.conftest import start_worker, stop_worker
from tests.e2e.test_cli_ops import tether
from tests.foreign_agents import (
    OPENAI_AGENTS,
    Crashes,
    at_gate,
    call,
    open_gate,
    ran,
    spent,
    turns,
    waiting,
)
from tether import Client, NatsConfig
from tether.testing.llm import ScriptedModel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sdk_client")]
RESPONSES = "tests.apps.openai_responses:app"


@pytest.fixture
async def crashes(config: NatsConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Crashes:
    return await Crashes(config, OPENAI_AGENTS, tmp_path, monkeypatch).register()


async def test_a_worker_killed_mid_tool_reruns_only_that_tool(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    key, gates = f"k{uuid.uuid4().hex[:6]}", crashes.gates()
    question = model.conversation(
        call("get_weather", city=key), call("slow_lookup", key=key), {"content": "42."}
    )
    handle = await crashes.killed_when(
        lambda: client.submit_agent("oai_helper", question), at_gate(gates, key)
    )
    open_gate(gates, key)

    assert await crashes.survive(handle) == "42."
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    assert ran(executions, f"get_weather {key}") == 1  # finished before the kill
    assert ran(executions, f"slow_lookup {key}") == 2  # in flight: runs again
    assert (await spent(handle)).requests == 3


async def test_a_worker_killed_while_its_task_waits_for_approval_loses_nothing(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    question = model.conversation(
        call("get_weather", city=path), call("delete_file", path=path), {"content": "Done."}
    )
    handle = await crashes.killed_when(lambda: client.submit_agent("oai_helper", question), waiting)
    await client.send_input(handle.task_id, {"approved": True})

    assert await crashes.survive(handle) == "Done."
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}
    assert ran(executions, f"get_weather {path}") == 1
    assert ran(executions, f"delete_file {path}") == 1
    assert (await spent(handle)).requests == 3


async def test_a_triage_agent_restarted_while_it_waits_is_answered_with_tether_input(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    """A handoff, an `as_tool` sub-agent and a `needs_approval` tool in one run; its
    worker process dies while the task waits, a person answers from the CLI, and a new
    worker process finishes it without sending any model call again."""
    tag = uuid.uuid4().hex[:6]
    topic, path, question = f"topic-{tag}", f"/tmp/{tag}", f"question {tag}"
    triage = [
        call("research", input=topic),
        call("delete_file", path=path),
        call("transfer_to_oai_specialist"),
        {"content": "The specialist answers."},
    ]
    sub = [call("get_weather", city=topic), {"content": f"{topic} is sunny."}]
    conversations = [{"match": question, "turns": triage}, {"match": topic, "turns": sub}]
    model.load({"conversations": conversations})
    handle = await crashes.killed_when(lambda: client.submit_agent("oai_triage", question), waiting)
    asked = await handle.get()
    assert asked.input_request is not None and path in asked.input_request.prompt

    answered = await tether(crashes.config, "input", handle.task_id, '{"approved": true}')
    assert answered.code == 0, answered.err
    restarted = start_worker(crashes.config, OPENAI_AGENTS, log=crashes.folder / "new.log")
    try:
        assert await handle.wait(timeout=60) == "The specialist answers."
    finally:
        stop_worker(restarted)

    assert turns(model, question) == {0: 1, 1: 1, 2: 1, 3: 1}  # none sent twice
    assert turns(model, topic) == {0: 1, 1: 1}  # nor the sub-agent's
    assert ran(executions, f"get_weather {topic}") == 1
    assert ran(executions, f"delete_file {path}") == 1
    calls = model.requests(question)
    assert calls[1]["tool_texts"] == [f"{topic} is sunny."]  # the sub-agent's answer
    assert calls[2]["tool_texts"][-1] == f"deleted {path}"  # the approved call's result
    assert calls[3]["system"] == "You handle billing."  # the specialist took over
    assert (await spent(handle)).requests == 6  # nested calls counted


async def test_a_tool_that_runs_the_sdk_itself_is_durable_through_the_drop_in_runner(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    key, gates = f"k{uuid.uuid4().hex[:6]}", crashes.gates()
    text = f"text {key}"
    first = [call("get_weather", city=key), call("slow_lookup", key=key), {"content": "One."}]
    again = {"match": f"{text} again", "turns": [{"content": "Two."}]}
    model.load({"conversations": [again, {"match": text, "turns": first}]})
    handle = await crashes.killed_when(
        lambda: client.submit([{"tool": "summarize", "input": text}]), at_gate(gates, key)
    )
    open_gate(gates, key)

    assert await crashes.survive(handle) == "One. / Two."
    assert turns(model, text) == {0: 1, 1: 1, 2: 1}
    assert ran(executions, f"get_weather {key}") == 1
    assert ran(executions, f"slow_lookup {key}") == 2


async def test_guardrails_that_ran_before_the_kill_do_not_run_again(
    crashes: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    """Two guarded runs in one step (the drop-in `Runner`): the worker dies in the second
    run's tool, after the first run's input and output guardrails and the second's input
    guardrail ran; none of them runs again (a guardrail may call a model)."""
    key, gates = f"k{uuid.uuid4().hex[:6]}", crashes.gates()
    text = f"text {key}"
    again = [call("slow_lookup", key=key), {"content": "Two."}]
    model.load(
        {
            "conversations": [
                {"match": f"{text} again", "turns": again},
                {"match": text, "turns": [{"content": "One."}]},
            ]
        }
    )
    handle = await crashes.killed_when(
        lambda: client.submit([{"tool": "guarded_twice", "input": text}]), at_gate(gates, key)
    )
    open_gate(gates, key)

    assert await crashes.survive(handle) == "One. / Two."
    lines = [line.rsplit(" ", 1)[0] for line in executions.read_text().splitlines()]
    checks = [line for line in lines if line.startswith(("screened ", "polite "))]
    assert sorted(checks) == sorted(
        [f"screened {text}", "polite One.", f"screened {text} again", "polite Two."]
    )
    assert turns(model, text) == {0: 1}
    assert turns(model, f"{text} again") == {0: 1, 1: 1}
    assert ran(executions, f"slow_lookup {key}") == 2  # in flight: runs again


@pytest.fixture
async def on_responses(
    config: NatsConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Crashes:
    """Worker processes of an app on the SDK's default API (apps of their own: the API
    is a per-process default)."""
    return await Crashes(config, RESPONSES, tmp_path, monkeypatch).register()


async def test_an_agent_on_the_responses_api_killed_mid_tool_sends_no_finished_call_again(
    on_responses: Crashes, client: Client, model: ScriptedModel, executions: Path
) -> None:
    """The SDK's default API (`/v1/responses`): a new worker process finishes the run
    from the journal, each response read back as it was stored."""
    crashes = on_responses
    key, gates = f"k{uuid.uuid4().hex[:6]}", crashes.gates()
    question = model.conversation(
        {"content": "Checking.", **call("get_weather", city=key)},
        call("slow_lookup", key=key),
        {"content": "42."},
    )
    handle = await crashes.killed_when(
        lambda: client.submit_agent("oai_responses", question), at_gate(gates, key)
    )
    open_gate(gates, key)
    restarted = start_worker(crashes.config, RESPONSES, log=crashes.folder / "new.log")
    try:
        assert await handle.wait(timeout=60) == "42."
    finally:
        stop_worker(restarted)

    sent = model.requests(question)
    assert {r["api"] for r in sent} == {"responses"}
    assert turns(model, question) == {0: 1, 1: 1, 2: 1}  # no model call sent twice
    assert sent[1]["tool_texts"] == [f"sunny in {key}"]
    assert sent[2]["tool_texts"] == [f"sunny in {key}", f"{key} = 42"]
    assert ran(executions, f"get_weather {key}") == 1
    assert ran(executions, f"slow_lookup {key}") == 2
    assert (await spent(handle)).requests == 3
