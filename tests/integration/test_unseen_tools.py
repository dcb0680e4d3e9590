"""Tools a model could not have seen are said once in the task's status: llama-server's
`/props` says the chat template has no place for tools (SmolLM2's), or
`tool_choice="required"` got no call back (real `openai` client, scripted model in its
own process serving `/props`)."""

from __future__ import annotations

import html
import uuid
from typing import Any

import httpx
from rich.console import Console

from tests.apps.agents import QUICK
from tests.conftest import MakeWorker
from tether import Agent, App, Client, NatsConfig, OpenAIModel, StepContext
from tether.cli.tables import record_table
from tether.schemas.events import StepCompleted
from tether.testing.llm import ScriptedModel
from tether.ui import Dashboard

ANSWER = "A checkpoint is a step's stored result."


def _app(model: ScriptedModel, **options: Any) -> App:
    app = App(f"unseen-{uuid.uuid4().hex[:6]}")

    @app.tool
    async def lookup(ctx: StepContext, word: str) -> str:
        """Look a word up."""
        return f"{word}: a step's stored result"

    scripted = OpenAIModel("scripted", base_url=model.base_url, api_key="test")
    app.add(Agent("looker", model=scripted, tools=[lookup], retry=QUICK, **options))
    return app


def _load(model: ScriptedModel, *turns: dict[str, Any], **script: Any) -> str:
    question = f"what is a checkpoint {uuid.uuid4().hex[:8]}"
    model.load({"conversations": [{"match": question, "turns": list(turns)}], **script})
    return question


async def _notes(client: Client, task_id: str) -> tuple[list[str], list[list[str]]]:
    """The record's notes, and those of each step_completed event that has some."""
    events = [e async for e in client.handle(task_id).events()]
    said = [e.notes for e in events if isinstance(e, StepCompleted) and e.notes]
    record = await client.handle(task_id).get()
    return record.notes, said


async def test_a_template_without_tools_is_said_once_in_the_status(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    api: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
) -> None:
    await make_worker(_app(model))
    # A template with no tools, yet a call: the scripted model plays one that made it up.
    call = {"tool_calls": [{"name": "lookup", "arguments": {"word": "checkpoint"}}]}
    question = _load(model, call, {"content": ANSWER}, template_tools=False)

    handle = await client.submit_agent("looker", question)

    assert await handle.wait(timeout=30) == ANSWER
    notes, on_events = await _notes(client, handle.task_id)
    assert len(notes) == 1, notes  # two turns, said once
    assert "never saw its tools" in notes[0] and "supports_tools is false" in notes[0], notes
    assert model.base_url in notes[0] and "--jinja" in notes[0], notes  # where, and the fix
    assert on_events == [notes], on_events
    shown = Console(width=1000, record=True)
    shown.print(record_table(await client.handle(handle.task_id).get(), None, None, None))
    said = " ".join(shown.export_text().split())  # `tether status`, its table unwrapped
    assert f"note {notes[0]}" in said, said
    async with Dashboard(config, port=0) as ui, httpx.AsyncClient(base_url=ui.url) as http:
        page = html.unescape((await http.get(f"/tasks/{handle.task_id}")).text)
    assert notes[0] in page, page  # the dashboard's task page


async def test_required_tool_choice_answered_in_text_is_said_in_the_status(
    client: Client, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(_app(model, tool_choice="required"))
    question = _load(model, {"content": ANSWER})  # no /props: not llama.cpp

    handle = await client.submit_agent("looker", question)

    assert await handle.wait(timeout=30) == ANSWER
    notes, _ = await _notes(client, handle.task_id)
    assert len(notes) == 1 and "tool_choice was 'required'" in notes[0], notes


async def test_a_model_that_sees_and_calls_its_tools_gets_no_note(
    client: Client, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(_app(model, tool_choice="required"))
    call = {"tool_calls": [{"name": "lookup", "arguments": {"word": "checkpoint"}}]}
    question = _load(model, call, {"content": ANSWER}, template_tools=True)

    handle = await client.submit_agent("looker", question)

    assert await handle.wait(timeout=30) == ANSWER
    assert await _notes(client, handle.task_id) == ([], [])
